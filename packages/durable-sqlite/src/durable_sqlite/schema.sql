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


-- What this file holds, for the code that opens it. schema_version says which shape of
-- the tables above the file was created with, so that a later release can migrate it and
-- an older one can refuse a file it does not understand.
CREATE TABLE IF NOT EXISTS durable_meta (
    name TEXT PRIMARY KEY,
    value NOT NULL
) WITHOUT ROWID;

-- A fresh file is created at the current version; a file of version 1 is migrated by
-- migrate_2.sql in the same transaction (connection._create), which then sets 2.
INSERT INTO durable_meta (name, value) VALUES ('schema_version', 2)
ON CONFLICT (name) DO NOTHING;
