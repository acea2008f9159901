-- The conformance probe's counters: the application data a transact effect co-commits
-- with its record, in a table of its own that only test files made by the testing hook
-- have. Not part of schema.sql, so a user's store never carries it.

-- name: create
CREATE TABLE IF NOT EXISTS durable_probe (
    workflow TEXT NOT NULL,
    counter TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (workflow, counter)
) WITHOUT ROWID;

-- name: bump
INSERT INTO durable_probe (workflow, counter, value) VALUES (:workflow, :counter, 1)
ON CONFLICT (workflow, counter) DO UPDATE SET value = value + 1
RETURNING value;

-- name: count
SELECT value FROM durable_probe WHERE workflow = :workflow AND counter = :counter;
