-- The durable-sqlite schema. Run on every open, so every statement is idempotent
-- (CREATE ... IF NOT EXISTS) and the whole script runs inside one BEGIN IMMEDIATE
-- transaction: two processes opening a fresh file at once create it once.
--
-- Every table name starts with "durable_" so that the store can share a file with the
-- application's own tables, which is the point: a transact effect writes those tables
-- in the same commit as its record. A table of one of these names that does not have
-- these columns belongs to somebody else, and the store refuses the file rather than
-- touch it.
--
-- Moments are INTEGER microseconds since the Unix epoch, UTC: exact (no float rounding
-- between a clock reading and what is stored), cheap to compare, and readable from the
-- sqlite3 shell with datetime(column / 1000000, 'unixepoch').


-- What each workflow has done: one row per record.
--
-- The one table here that keeps its rowid, and it names it. seq is the load order (a
-- workflow's records are read ORDER BY seq) and the number behind an inbox key. SQLite
-- reserves the right to renumber the rowids of a table with no explicit INTEGER PRIMARY
-- KEY when the database is VACUUMed; declaring the column makes the number part of the
-- row, so the order survives VACUUM. Not AUTOINCREMENT: a seq freed by a discard may be
-- drawn again, which no requirement forbids (keys order within a workflow, never across
-- them), and AUTOINCREMENT would cost a write to sqlite_sequence on every insert.
CREATE TABLE IF NOT EXISTS durable_checkpoint (
    seq INTEGER PRIMARY KEY,
    workflow TEXT NOT NULL,
    key TEXT NOT NULL,
    -- The codec's encoding, compared byte for byte to decide a race. TEXT affinity keeps a
    -- str a str and stores bytes (a binary codec) as a BLOB, unconverted either way.
    value TEXT NOT NULL,
    -- The store's clock at the winning write; a losing write never touches it.
    recorded_at INTEGER NOT NULL,
    -- The kind of operation that wrote the record ('step', 'transact', 'sleep', ...), kept
    -- by the winning write, or NULL: written by supply, append or a plain record, or before
    -- the store kept operations (schema version 4; migrate_4.sql adds the column, last, so
    -- every older row reads NULL and is refused to no operation).
    operation TEXT,
    -- First-writer-wins is this constraint: an upsert that meets it keeps the row.
    UNIQUE (workflow, key)
);

-- No index on (workflow, seq): load and history find a workflow's rows through the UNIQUE
-- index and sort them by seq, once per pass, which is cheaper overall than keeping a
-- second index in step on every recorded step (a page more in every commit).


-- Who may write to each workflow. One row per workflow ever claimed or discarded, kept
-- forever: the row is the fence, and deleting it would hand the next claim token 1 while
-- a stalled pass still holds a higher one.
CREATE TABLE IF NOT EXISTS durable_claim (
    workflow TEXT PRIMARY KEY,
    -- The highest token issued. A write carrying any other token is refused.
    token INTEGER NOT NULL,
    -- The claim's two deadlines; both NULL once released or discarded (free, fence kept).
    -- live_until never exceeds budget_until: renewal moves the first and cannot lift it
    -- past the second.
    live_until INTEGER,
    budget_until INTEGER,
    -- The liveness window the claim was taken with, which each renewal grants again.
    liveness INTEGER NOT NULL
) WITHOUT ROWID;


-- When each workflow may run: one visibility-scored row per workflow.
--
-- A row is runnable once visible_at has passed. Taking it pushes visible_at out by the
-- scheduler's lease under a fresh receipt, so a taker that dies simply lets the row
-- become visible again: the score is the timer and the redelivery at once.
CREATE TABLE IF NOT EXISTS durable_queue (
    workflow TEXT PRIMARY KEY,
    visible_at INTEGER NOT NULL,
    -- The receipt of the delivery out now, NULL when none is. make_ready clears it, so an
    -- answer for an older delivery matches nothing and cannot undo the newer wakeup;
    -- cancel deletes the row, so such an answer has nothing to reinstate.
    receipt TEXT
) WITHOUT ROWID;

-- next_ready takes the earliest visible row.
CREATE INDEX IF NOT EXISTS durable_queue_visible ON durable_queue (visible_at, workflow);


-- Each workflow's life: kind, input, status, attempts and outcome (the lifecycle
-- capability, durable.interfaces.Lifecycle). One row per workflow that was started,
-- begun, cancelled or migrated; written only by the moves that already write (start,
-- begin, settle, cancel, retry), never by a step.
--
-- A rowid table: a row may carry a large input, value or traceback, which SQLite advises
-- against in a WITHOUT ROWID table. input and value are the codec's encodings (TEXT
-- affinity keeps a str a str and bytes a BLOB), compared byte for byte by start. waits is
-- a JSON array of the keys a sleeping or blocked workflow reached. until_at is a sleeping
-- workflow's deadline; a running one's liveness is read from its claim instead.
CREATE TABLE IF NOT EXISTS durable_workflow (
    workflow TEXT PRIMARY KEY,
    kind TEXT,
    input TEXT,
    queue TEXT NOT NULL DEFAULT 'default',
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    since INTEGER,
    step TEXT,
    beat_at INTEGER,
    until_at INTEGER,
    waits TEXT,
    value TEXT,
    failure_type TEXT,
    failure_message TEXT,
    failure_traceback TEXT,
    failure_attempts INTEGER,
    started_at INTEGER,
    updated_at INTEGER NOT NULL
);

-- Listing reads one of these backwards from its cursor, so a page costs the page, never
-- the table: by status (list(status="failed") among any number of finished ones), by
-- kind and status (and by kind alone, as a merge of its seven statuses), and by neither.
CREATE INDEX IF NOT EXISTS durable_workflow_status ON durable_workflow (status, updated_at, workflow);
CREATE INDEX IF NOT EXISTS durable_workflow_kind ON durable_workflow (kind, status, updated_at, workflow);
CREATE INDEX IF NOT EXISTS durable_workflow_updated ON durable_workflow (updated_at, workflow);


-- Per-queue limits (the limits capability, durable.interfaces.Limited). Version 3 added
-- these four tables, and nothing else: a store that sets no limit and no priority keeps
-- them empty, and its takes read them once (two EXISTS on empty tables) and go the way
-- they went before.
--
-- A queue's limit, set by an operator (durable queue limit) and read by every take.
-- NULL is "not limited on that side"; a queue with neither has no row.
CREATE TABLE IF NOT EXISTS durable_limit (
    queue TEXT PRIMARY KEY,
    concurrent INTEGER,
    rate INTEGER
) WITHOUT ROWID;

-- A slot of a queue's concurrency limit, held by one delivery (receipt) while its pass
-- runs. live_until is pushed on by hold at each heartbeat; a slot past it is not counted,
-- so a killed worker's slot comes back by itself, with no sweeper. Deleted when the
-- delivery is answered or the workflow cancelled. One per workflow.
CREATE TABLE IF NOT EXISTS durable_slot (
    workflow TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    receipt TEXT NOT NULL,
    live_until INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS durable_slot_queue ON durable_slot (queue, live_until);

-- The hand-outs of rate-limited queues in the last second (older rows are pruned by the
-- take that adds one).
CREATE TABLE IF NOT EXISTS durable_handout (
    queue TEXT NOT NULL,
    at INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS durable_handout_queue ON durable_handout (queue, at);

-- A workflow's priority within its queue (higher first), kept across its passes; a
-- workflow without a row has priority 0.
CREATE TABLE IF NOT EXISTS durable_priority (
    workflow TEXT PRIMARY KEY,
    priority INTEGER NOT NULL
) WITHOUT ROWID;


-- What this file holds, for the code that opens it. schema_version says which shape of
-- the tables above the file was created with, so that a later release can migrate it and
-- an older one can refuse a file it does not understand.
CREATE TABLE IF NOT EXISTS durable_meta (
    name TEXT PRIMARY KEY,
    value NOT NULL
) WITHOUT ROWID;

-- A fresh file is created at the current version; a file of an older version is migrated
-- in the same transaction (connection._create): version 1 by migrate_2.sql, then version 2
-- by migrate_3.sql, then version 3 by migrate_4.sql, each setting its own number.
INSERT INTO durable_meta (name, value) VALUES ('schema_version', 4)
ON CONFLICT (name) DO NOTHING;
