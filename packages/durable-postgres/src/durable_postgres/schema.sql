-- The durable tables, created by migrate() inside one transaction that holds an advisory lock,
-- so that many workers starting at once create them once. Every statement is idempotent, so a
-- second run changes nothing.
--
-- The schema name arrives as a quoted identifier in place of the schema placeholder; the
-- placeholders are filled by psycopg.sql, never by string formatting. Keep curly braces out
-- of these comments: psycopg.sql would read them as placeholders.

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per schema version applied. migrate() reads it before touching anything else, so an
-- already-migrated database costs one lookup and no DDL (which would need CREATE privileges).
CREATE TABLE IF NOT EXISTS {schema}.workflow_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The order of a workflow's records. A heap scan looks like insertion order right up until
-- the no-op conflict update of a losing write rewrites a tuple and moves it, so the order is
-- a number instead. It is one sequence shared by every workflow: the numbers need only
-- increase within a workflow, gaps are harmless, and nextval is atomic across connections
-- where a maximum read inside the insert is a race two callers can both win.
CREATE SEQUENCE IF NOT EXISTS {schema}.workflow_checkpoint_seq AS bigint;

-- What each workflow has done. value holds the codec's text exactly as it was encoded: TEXT
-- rather than jsonb, because jsonb reorders keys and drops whitespace, and first-writer-wins
-- decides who won by comparing the stored encoding with the one a write carried.
--
-- seq takes the sequence as a DEFAULT rather than being an identity column, because append
-- draws one nextval and writes it as both the inbox key and the seq (so the key order and the
-- load order are one order), and an identity is a number no statement may supply.
--
-- at is the server's clock at the winning write: losing writes never touch it.
CREATE TABLE IF NOT EXISTS {schema}.workflow_checkpoint (
    workflow text        NOT NULL,
    key      text        NOT NULL,
    value    text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    seq      bigint      NOT NULL DEFAULT nextval({checkpoint_seq}::regclass),
    PRIMARY KEY (workflow, key)
);

-- The kind of operation that wrote each record ('step', 'transact', 'sleep', ...), kept by
-- the winning write, or NULL: written by supply, append or a plain record, or before the
-- store kept operations (schema version 4). Added rather than declared above, so that this
-- one idempotent statement upgrades a version-2 table in place: every older row reads NULL,
-- refused to no operation, and nothing is rewritten (a nullable column without a default
-- costs a catalog change, not a table rewrite).
ALTER TABLE {schema}.workflow_checkpoint ADD COLUMN IF NOT EXISTS operation text;

ALTER SEQUENCE {schema}.workflow_checkpoint_seq OWNED BY {schema}.workflow_checkpoint.seq;

-- load and history read one workflow in seq order.
CREATE INDEX IF NOT EXISTS workflow_checkpoint_order ON {schema}.workflow_checkpoint (workflow, seq);

-- Who may write to each workflow. The row is never deleted: tokens must increase forever,
-- across release, expiry and discard, so releasing or discarding raises token and clears the
-- deadlines instead of removing the row.
--
-- Two deadlines, because one was answering two questions: live_until is how soon a dead
-- holder is noticed (renew pushes it forward by liveness) and budget_until is how long the
-- pass may take at all (renew never lifts it). claimed_at is the moment of the claim, kept
-- so that the claim's upsert can compare the old deadlines with the one clock reading its
-- new row carries.
CREATE TABLE IF NOT EXISTS {schema}.workflow_claim (
    workflow     text        PRIMARY KEY,
    token        bigint      NOT NULL,
    claimed_at   timestamptz,
    live_until   timestamptz,
    budget_until timestamptz,
    liveness     interval
);

-- Receipts tell one handing-out of a workflow from the next, across every workflow.
CREATE SEQUENCE IF NOT EXISTS {schema}.workflow_queue_receipt AS bigint;

-- When each workflow may run: one visibility-scored row per workflow. A row is runnable once
-- visible_at has passed. Taking it pushes visible_at out by the lease and stamps a fresh
-- receipt, so a taker that dies simply lets the row become visible again (the score is the
-- timer). make_ready clears the receipt, so an answer for an older delivery matches nothing
-- and cannot undo it; cancel deletes the row, so an answer for a cancelled delivery has
-- nothing to reinstate.
CREATE TABLE IF NOT EXISTS {schema}.workflow_queue (
    workflow   text        PRIMARY KEY,
    visible_at timestamptz NOT NULL,
    receipt    bigint
);

-- next_ready takes the row that became visible first.
CREATE INDEX IF NOT EXISTS workflow_queue_visible ON {schema}.workflow_queue (visible_at);

-- Version 2: each workflow's life (kind, input, status, attempts, outcome), one row per
-- workflow, written by the moves that already exist: start (admit), a pass's claim (begin), its
-- release (settle), its renewal (beat), cancel (withdraw) and retry (readmit). A step writes
-- nothing here. input and value hold the codec's text exactly as encoded, like the records:
-- start's idempotence compares encodings. Times are the server's clock, like every lease.
-- attempts counts passes begun since the last one that made progress; it is raised by the
-- claim's own statement, so a pass whose process is killed is counted all the same.
CREATE TABLE IF NOT EXISTS {schema}.workflow_status (
    workflow          text        PRIMARY KEY,
    kind              text,
    input             text,
    queue             text        NOT NULL DEFAULT 'default',
    status            text        NOT NULL CHECK (status IN
        ('ready', 'running', 'sleeping', 'blocked', 'finished', 'failed', 'cancelled')),
    attempts          integer     NOT NULL DEFAULT 0,
    owner             text,
    since             timestamptz,
    step              text,
    beat_at           timestamptz,
    until_at          timestamptz,
    waits             text[],
    value             text,
    failure_type      text,
    failure_message   text,
    failure_traceback text,
    failure_attempts  integer,
    started_at        timestamptz,
    updated_at        timestamptz NOT NULL
);

-- Listing by status, by kind and status, and everything, newest first, each one index range
-- read backwards from the cursor: a page costs its own rows, never the store's.
CREATE INDEX IF NOT EXISTS workflow_status_status
    ON {schema}.workflow_status (status, updated_at, workflow);
CREATE INDEX IF NOT EXISTS workflow_status_kind
    ON {schema}.workflow_status (kind, status, updated_at, workflow);
CREATE INDEX IF NOT EXISTS workflow_status_updated
    ON {schema}.workflow_status (updated_at, workflow);
CREATE INDEX IF NOT EXISTS workflow_status_kind_updated
    ON {schema}.workflow_status (kind, updated_at, workflow);

-- Version 3: per-queue limits (the limits capability, durable.interfaces.Limited). Four
-- tables and nothing changed in the others; a store that sets no limit and no priority keeps
-- them empty, and its takes go the way they went before (the take reads two EXISTS of them).
--
-- A queue's limit, set by an operator and read by every take; NULL is unlimited on that side.
CREATE TABLE IF NOT EXISTS {schema}.queue_limit (
    queue      text    PRIMARY KEY,
    concurrent integer CHECK (concurrent >= 1),
    rate       integer CHECK (rate >= 1)
);

-- A slot of a queue's concurrency limit, held by one delivery (receipt) while its pass runs.
-- live_until is pushed on by hold at each heartbeat; a slot past it is not counted, so a
-- killed worker's slot comes back by itself, with no sweeper. Deleted when the delivery is
-- answered. One per workflow.
CREATE TABLE IF NOT EXISTS {schema}.queue_slot (
    workflow   text        PRIMARY KEY,
    queue      text        NOT NULL,
    receipt    bigint      NOT NULL,
    live_until timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_slot_queue ON {schema}.queue_slot (queue, live_until);

-- The hand-outs of rate-limited queues in the last second (older rows are pruned by the take
-- that adds one).
CREATE TABLE IF NOT EXISTS {schema}.queue_handout (
    queue text        NOT NULL,
    at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_handout_queue ON {schema}.queue_handout (queue, at);

-- A workflow's priority within its queue (higher first), kept across its passes; a workflow
-- without a row has priority 0.
CREATE TABLE IF NOT EXISTS {schema}.workflow_priority (
    workflow text    PRIMARY KEY,
    priority integer NOT NULL
);
