-- Migration from schema version 1 (the release before workflow lifecycle) to 2. Run by
-- connection._create inside the open's one BEGIN IMMEDIATE transaction, after schema.sql
-- has created durable_workflow and its indexes, and only when durable_meta said 1; the
-- version is set to 2 in the same transaction, so a second opener (waiting on the write
-- lock) finds 2 and migrates nothing, and a crash leaves the file at version 1, untouched.
--
-- :now is SQLite's own clock (the open has no Clock of its own).


-- name: backfill
-- Every workflow the old release knew (it has records, or it is queued) gets a row with no
-- kind and no attempts. Its status is read from the queue, the only place the old release
-- kept any: ready when queued and due or out with a taker; sleeping until visible_at when
-- queued for later; blocked when not queued. An unqueued workflow is finished or blocked
-- and nothing in the data says which: blocked is the safe answer (an arrival still runs
-- it, and a body that is replayed finishes again from its records), where finished would
-- strand a waiting one for good. updated_at is the workflow's last record, so listing
-- keeps the order in which the old release last touched them. A discarded workflow has
-- neither records nor a queue row (only its fence), and stays forgotten.
INSERT INTO durable_workflow (workflow, kind, input, status, attempts, until_at, updated_at)
SELECT
    w.workflow,
    NULL,
    NULL,
    CASE
        WHEN q.workflow IS NULL THEN 'blocked'
        WHEN q.receipt IS NOT NULL OR q.visible_at <= :now THEN 'ready'
        ELSE 'sleeping'
    END,
    0,
    CASE WHEN q.receipt IS NULL AND q.visible_at > :now THEN q.visible_at END,
    coalesce(
        (SELECT max(c.recorded_at) FROM durable_checkpoint AS c WHERE c.workflow = w.workflow),
        :now
    )
FROM (
    SELECT workflow FROM durable_checkpoint
    UNION
    SELECT workflow FROM durable_queue
) AS w
LEFT JOIN durable_queue AS q ON q.workflow = w.workflow
WHERE true
ON CONFLICT (workflow) DO NOTHING;

-- name: mark
UPDATE durable_meta SET value = 2 WHERE name = 'schema_version';
