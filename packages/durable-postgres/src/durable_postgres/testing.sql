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
