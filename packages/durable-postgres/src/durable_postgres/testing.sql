-- The conformance probe's table: counters that transact effects move, in the testbed's own
-- schema so that they vanish with it. Keep curly braces out of these comments.

-- name: create
CREATE TABLE IF NOT EXISTS {schema}.probe_counter (
    workflow text   NOT NULL,
    counter  text   NOT NULL,
    value    bigint NOT NULL,
    PRIMARY KEY (workflow, counter)
);

-- name: bump
-- One statement, so the effect is a single write inside the transact's transaction.
INSERT INTO {schema}.probe_counter AS c (workflow, counter, value)
VALUES (%(workflow)s, %(counter)s, 1)
ON CONFLICT (workflow, counter) DO UPDATE SET value = c.value + 1
RETURNING value;

-- name: count
SELECT value FROM {schema}.probe_counter WHERE workflow = %(workflow)s AND counter = %(counter)s;

-- name: drop
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- The locks a testbed built with gap= takes before it awaits the gap, inside the move's own
-- transaction: the row the move's statement would lock first, so that a rival move waits for
-- the held one to commit (which is the proof that the statement's lock is what serialises
-- them). A store opened without gap= never sends these.

-- name: lock_claim
SELECT 1 FROM {schema}.workflow_claim WHERE workflow = %(workflow)s FOR UPDATE;

-- name: share_claim
-- record's own lock: FOR SHARE, as its fence takes, so records do not wait for each other.
SELECT 1 FROM {schema}.workflow_claim WHERE workflow = %(workflow)s FOR SHARE;

-- name: lock_status
SELECT 1 FROM {schema}.workflow_status WHERE workflow = %(workflow)s FOR UPDATE;

-- name: lock_queue
SELECT 1 FROM {schema}.workflow_queue WHERE workflow = %(workflow)s FOR UPDATE;
