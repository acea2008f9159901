-- The lifecycle's statements (durable.interfaces.Lifecycle), looked up by their "-- name:"
-- lines like statements.sql's, with :now the store's clock in the same way. Each move is
-- one transaction of a few of them (checkpointer.py, durable.py); the claim's own
-- statements (claim, renew, raise_fence) are statements.sql's, unchanged, so begin is
-- the claim's write plus its row, settle the release's plus its row, and beat the
-- renewal's plus the step.


-- name: life
SELECT kind, input, status, owner, attempts FROM durable_workflow WHERE workflow = :workflow;

-- name: has_records
SELECT EXISTS (SELECT 1 FROM durable_checkpoint WHERE workflow = :workflow);

-- name: admit_insert
INSERT INTO durable_workflow (workflow, kind, input, queue, status, attempts, started_at, updated_at)
VALUES (:workflow, :kind, :input, :queue, 'ready', 0, :now, :now);

-- name: admit_adopt
-- A workflow that has a row but no kind (begun by a worker serving a single body, made by
-- arrive or send, or written by the previous release) takes the kind and input it is
-- started with, and starts afresh: ready, no attempts, no outcome. Its records are kept.
UPDATE durable_workflow
SET kind = :kind, input = :input, queue = :queue, status = 'ready', attempts = 0,
    owner = NULL, since = NULL, step = NULL, beat_at = NULL, until_at = NULL, waits = NULL,
    value = NULL, failure_type = NULL, failure_message = NULL, failure_traceback = NULL,
    failure_attempts = NULL, started_at = :now, updated_at = :now
WHERE workflow = :workflow AND kind IS NULL;

-- name: begin_life
-- Run in begin's transaction right after the claim statement took the claim: the attempt
-- is counted in the same commit as the claim, so a pass whose process is killed the next
-- instant has counted. A workflow never started gets a row with no kind.
INSERT INTO durable_workflow (workflow, status, attempts, owner, since, updated_at)
VALUES (:workflow, 'running', 1, :owner, :now, :now)
ON CONFLICT (workflow) DO UPDATE SET
    status = 'running',
    attempts = attempts + 1,
    owner = excluded.owner,
    since = excluded.since,
    step = NULL,
    beat_at = NULL,
    until_at = NULL,
    waits = NULL,
    updated_at = excluded.updated_at
RETURNING kind, input, attempts;

-- name: beat_step
-- With the renewal, in its transaction; not a transition, so updated_at stays.
UPDATE durable_workflow SET step = :step, beat_at = :now WHERE workflow = :workflow;

-- name: settle_release
-- release's write, fenced: only the holder of the highest token matches, and it raises
-- the token, so the settled pass can write nothing more and the next claim outranks it.
UPDATE durable_claim
SET token = token + 1, live_until = NULL, budget_until = NULL
WHERE workflow = :workflow AND token = :token
RETURNING token;

-- name: settle_life
-- The outcome, in the transaction whose settle_release matched. An upsert so that a pass
-- taken with a plain claim (which wrote no row) still settles into one.
INSERT INTO durable_workflow (
    workflow, status, attempts, until_at, waits, value,
    failure_type, failure_message, failure_traceback, failure_attempts, updated_at
)
VALUES (
    :workflow, :status, :attempts, :until, :waits, :value,
    :failure_type, :failure_message, :failure_traceback, :failure_attempts, :now
)
ON CONFLICT (workflow) DO UPDATE SET
    status = excluded.status,
    attempts = excluded.attempts,
    owner = NULL,
    since = NULL,
    step = NULL,
    beat_at = NULL,
    until_at = excluded.until_at,
    waits = excluded.waits,
    value = excluded.value,
    failure_type = excluded.failure_type,
    failure_message = excluded.failure_message,
    failure_traceback = excluded.failure_traceback,
    failure_attempts = excluded.failure_attempts,
    updated_at = excluded.updated_at;

-- name: withdraw_life
-- Cancel; the caller has raised the fence in the same transaction and checked that the
-- workflow is not terminal. A workflow with records but no row (made by arrive or send)
-- gets one. The last failure, if any, is kept for show.
INSERT INTO durable_workflow (workflow, status, attempts, updated_at)
VALUES (:workflow, 'cancelled', 0, :now)
ON CONFLICT (workflow) DO UPDATE SET
    status = 'cancelled',
    owner = NULL,
    since = NULL,
    step = NULL,
    beat_at = NULL,
    until_at = NULL,
    waits = NULL,
    updated_at = excluded.updated_at;

-- name: readmit_life
UPDATE durable_workflow
SET status = 'ready', attempts = 0, owner = NULL, since = NULL, step = NULL, beat_at = NULL,
    until_at = NULL, waits = NULL, value = NULL, failure_type = NULL, failure_message = NULL,
    failure_traceback = NULL, failure_attempts = NULL, updated_at = :now
WHERE workflow = :workflow AND status IN ('failed', 'cancelled');

-- name: forget_life
DELETE FROM durable_workflow WHERE workflow = :workflow;

-- name: ended
-- Whether a prune may discard the workflow (durable.interfaces.Prunable): its status and
-- when it last moved, read inside the discard's own BEGIN IMMEDIATE transaction, so no
-- retry can land between this read and the discard.
SELECT status, updated_at FROM durable_workflow WHERE workflow = :workflow;

-- name: backdate
-- The times an import keeps (durable.interfaces.Dated): updated_at, and started_at unless
-- :started is NULL; nothing else. Answers the row's workflow, or nothing for no row.
UPDATE durable_workflow
SET updated_at = :updated, started_at = coalesce(:started, started_at)
WHERE workflow = :workflow
RETURNING workflow;

-- name: status
-- The row, and the claim's token and liveness (read by the caller only when running).
SELECT w.workflow, w.status, w.kind, w.attempts, w.updated_at, w.started_at, w.input, w.queue,
       c.token, w.owner, w.since, w.step, w.until_at, c.live_until, w.waits, w.value,
       w.failure_type, w.failure_message, w.failure_traceback, w.failure_attempts
FROM durable_workflow AS w LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
WHERE w.workflow = :workflow;


-- Listing. Newest updated first, from a cursor (:at, :wf) that the first page sets above
-- every row; :limit is one more than the page, so the caller knows whether another
-- follows. Each statement walks one index backwards from the cursor (EXPLAIN QUERY PLAN
-- in tests/test_lifecycle.py holds them to it), so a page costs the page.

-- name: list_all
SELECT w.workflow, w.status, w.kind, w.attempts, w.updated_at, w.started_at, w.input, w.queue,
       c.token, w.owner, w.since, w.step, w.until_at, c.live_until, w.waits, w.value,
       w.failure_type, w.failure_message, w.failure_traceback, w.failure_attempts
FROM durable_workflow AS w INDEXED BY durable_workflow_updated
LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
WHERE (w.updated_at, w.workflow) < (:at, :wf)
ORDER BY w.updated_at DESC, w.workflow DESC
LIMIT :limit;

-- name: list_status
SELECT w.workflow, w.status, w.kind, w.attempts, w.updated_at, w.started_at, w.input, w.queue,
       c.token, w.owner, w.since, w.step, w.until_at, c.live_until, w.waits, w.value,
       w.failure_type, w.failure_message, w.failure_traceback, w.failure_attempts
FROM durable_workflow AS w INDEXED BY durable_workflow_status
LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
WHERE w.status = :status AND (w.updated_at, w.workflow) < (:at, :wf)
ORDER BY w.updated_at DESC, w.workflow DESC
LIMIT :limit;

-- name: list_kind_status
SELECT w.workflow, w.status, w.kind, w.attempts, w.updated_at, w.started_at, w.input, w.queue,
       c.token, w.owner, w.since, w.step, w.until_at, c.live_until, w.waits, w.value,
       w.failure_type, w.failure_message, w.failure_traceback, w.failure_attempts
FROM durable_workflow AS w INDEXED BY durable_workflow_kind
LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
WHERE w.kind = :kind AND w.status = :status AND (w.updated_at, w.workflow) < (:at, :wf)
ORDER BY w.updated_at DESC, w.workflow DESC
LIMIT :limit;

-- name: list_kind
-- A kind across every status: the newest page of each of the seven statuses, each read
-- from the (kind, status, updated_at, workflow) index, merged. At most seven pages read,
-- however many workflows of the kind there are.
SELECT w.workflow, w.status, w.kind, w.attempts, w.updated_at, w.started_at, w.input, w.queue,
       c.token, w.owner, w.since, w.step, w.until_at, c.live_until, w.waits, w.value,
       w.failure_type, w.failure_message, w.failure_traceback, w.failure_attempts
FROM (
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'ready' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'running' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'sleeping' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'blocked' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'finished' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'failed' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT workflow, updated_at FROM durable_workflow
        WHERE kind = :kind AND status = 'cancelled' AND (updated_at, workflow) < (:at, :wf)
        ORDER BY updated_at DESC, workflow DESC LIMIT :limit
    )
) AS p
JOIN durable_workflow AS w ON w.workflow = p.workflow
LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
ORDER BY p.updated_at DESC, p.workflow DESC
LIMIT :limit;
