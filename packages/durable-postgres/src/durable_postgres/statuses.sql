-- The statements of the lifecycle (schema version 2), one per "-- name:" section, rendered like
-- statements.sql. Every row of workflow_status is written by a move that already writes
-- something: a pass's claim, renewal and release each stay one statement, and start, cancel and
-- retry are each one transaction with the queue (PostgresDurable adds the queue's statement).
--
-- Lock order. Every statement that touches both tables takes the claim row before the status
-- row (begin, beat, settle, withdraw), and none takes them the other way round, so two moves on
-- one workflow wait for each other and never deadlock. That is why begin reads the status
-- without a lock and lets its status upsert, which sees the newest row, have the last word.
--
-- The schema arrives as a quoted identifier, values as named parameters. Keep curly braces out
-- of these comments.

-- name: ended
-- Whether a prune may discard the workflow (durable.interfaces.Prunable), sent inside the
-- discard's transaction after raise_fence took the claim row: FOR UPDATE locks the status row
-- to the commit, and under READ COMMITTED a retry committed meanwhile is re-read here (the row
-- no longer matches), while one still in flight waits for this transaction and then finds no
-- row to retry. The claim row, then the status row: the order discard and withdraw take them.
SELECT workflow FROM {schema}.workflow_status
WHERE workflow = %(workflow)s AND status = ANY(%(statuses)s::text[]) AND updated_at < %(before)s
FOR UPDATE;

-- name: backdate
-- The times an import keeps (durable.interfaces.Dated): updated_at, and started_at unless
-- %(started)s is NULL; nothing else. Answers the row's workflow, or no row.
UPDATE {schema}.workflow_status
SET updated_at = %(updated)s, started_at = coalesce(%(started)s::timestamptz, started_at)
WHERE workflow = %(workflow)s
RETURNING workflow;

-- name: status
-- One workflow's row, with the claim's token and liveness while a pass runs: running is written
-- once, by begin; how long the pass has left is the claim's, which renew moves.
SELECT s.workflow, s.kind, s.input, s.queue, s.status, s.attempts, s.owner, s.since, s.step,
       s.until_at, s.waits, s.value, s.failure_type, s.failure_message, s.failure_traceback,
       s.failure_attempts, s.started_at, s.updated_at,
       (SELECT c.token FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL),
       (SELECT c.live_until FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL)
FROM {schema}.workflow_status AS s
WHERE s.workflow = %(workflow)s;

-- name: admit_write
-- A new workflow, or the adoption of one with no kind (written before the lifecycle, or made by
-- a send without a start). Two starters racing on a new id serialise on the primary key: the
-- second waits for the first's commit, then finds a row with a kind and writes nothing. A row
-- with a kind is never touched: whether the request repeats it or conflicts with it is decided
-- by admit_read, in Python, with nothing written either way.
INSERT INTO {schema}.workflow_status AS s
    (workflow, kind, input, queue, status, attempts, started_at, updated_at)
SELECT %(workflow)s, %(kind)s, %(input)s, %(queue)s, 'ready', 0, now.t, now.t
FROM (SELECT clock_timestamp() AS t) AS now
ON CONFLICT (workflow) DO UPDATE SET
    kind = EXCLUDED.kind, input = EXCLUDED.input, queue = EXCLUDED.queue, status = 'ready',
    attempts = 0, owner = NULL, since = NULL, step = NULL, beat_at = NULL, until_at = NULL,
    waits = NULL, value = NULL, failure_type = NULL, failure_message = NULL,
    failure_traceback = NULL, failure_attempts = NULL, started_at = EXCLUDED.started_at,
    updated_at = EXCLUDED.updated_at
WHERE s.kind IS NULL
RETURNING 1;

-- name: admit_queue
-- make_ready, only for a workflow that is ready with exactly this kind and input: a start that
-- created it, or a repeat that finds it still ready (its queueing may have been lost). A
-- conflicting start, or a repeat of one that has since run, queues nothing.
INSERT INTO {schema}.workflow_queue AS queued (workflow, visible_at, receipt)
SELECT s.workflow, clock_timestamp(), NULL
FROM {schema}.workflow_status AS s
WHERE s.workflow = %(workflow)s AND s.kind = %(kind)s AND s.input = %(input)s
  AND s.status = 'ready'
ON CONFLICT (workflow) DO UPDATE SET
    visible_at = least(queued.visible_at, EXCLUDED.visible_at),
    receipt = NULL;

-- name: begin
-- The claim and the status in one statement. The claim is the claim statement's own upsert,
-- fed by a row that is absent when the workflow was already terminal when this statement
-- began; the status upsert runs only for a claim taken, raises attempts in that same write,
-- and refuses (WHERE) a row that became terminal since (a cancel that committed while this
-- statement waited for the claim row), in which case the caller releases the claim it took.
-- The last status read without a lock says whether the previous pass ever ended.
WITH life AS (
    SELECT status, owner, kind, input, attempts
    FROM {schema}.workflow_status WHERE workflow = %(workflow)s
), open AS (
    SELECT clock_timestamp() AS t
    WHERE NOT EXISTS (
        SELECT 1 FROM life WHERE status IN ('finished', 'failed', 'cancelled')
    )
), claimed AS (
    INSERT INTO {schema}.workflow_claim AS held
        (workflow, token, claimed_at, live_until, budget_until, liveness)
    SELECT %(workflow)s, 1, open.t, least(open.t + %(liveness)s, open.t + %(budget)s),
           open.t + %(budget)s, %(liveness)s
    FROM open
    ON CONFLICT (workflow) DO UPDATE SET
        token = held.token + 1,
        claimed_at = EXCLUDED.claimed_at,
        live_until = EXCLUDED.live_until,
        budget_until = EXCLUDED.budget_until,
        liveness = EXCLUDED.liveness
    WHERE held.live_until IS NULL
       OR held.live_until <= EXCLUDED.claimed_at
       OR held.budget_until <= EXCLUDED.claimed_at
    RETURNING token, claimed_at
), began AS (
    INSERT INTO {schema}.workflow_status AS s
        (workflow, status, attempts, owner, since, updated_at)
    SELECT %(workflow)s, 'running', 1, %(owner)s, claimed.claimed_at, claimed.claimed_at
    FROM claimed
    ON CONFLICT (workflow) DO UPDATE SET
        status = 'running', attempts = s.attempts + 1, owner = EXCLUDED.owner,
        since = EXCLUDED.since, step = NULL, beat_at = NULL, until_at = NULL, waits = NULL,
        updated_at = EXCLUDED.updated_at
    WHERE s.status NOT IN ('finished', 'failed', 'cancelled')
    RETURNING kind, input, attempts
)
SELECT (SELECT token FROM claimed), life.status, life.owner, life.kind, life.input,
       life.attempts, began.kind, began.input, began.attempts
FROM (SELECT 1) AS one
LEFT JOIN life ON true
LEFT JOIN began ON true;

-- name: beat
-- renew, and the step in flight, in one statement; no row back is renew's refusal.
WITH renewed AS (
    UPDATE {schema}.workflow_claim
    SET live_until = least(clock_timestamp() + liveness, budget_until)
    WHERE workflow = %(workflow)s
      AND token = %(token)s
      AND budget_until > clock_timestamp()
    RETURNING workflow
), marked AS (
    UPDATE {schema}.workflow_status AS s
    SET step = %(step)s, beat_at = clock_timestamp()
    FROM renewed
    WHERE s.workflow = renewed.workflow
    RETURNING 1
)
SELECT workflow FROM renewed;

-- name: settle
-- release and the outcome in one statement: the fence (the token must still be this pass's,
-- exactly as record's) releases the claim by raising the token, and the status is written only
-- from a row the fence returned. No row back: fenced, nothing written.
WITH fence AS (
    UPDATE {schema}.workflow_claim
    SET token = token + 1, claimed_at = NULL, live_until = NULL, budget_until = NULL,
        liveness = NULL
    WHERE workflow = %(workflow)s AND token = %(token)s
    RETURNING workflow
)
INSERT INTO {schema}.workflow_status AS s
    (workflow, status, attempts, until_at, waits, value, failure_type, failure_message,
     failure_traceback, failure_attempts, updated_at)
SELECT fence.workflow, %(status)s, %(attempts)s, %(until)s, %(waits)s, %(value)s,
       %(failure_type)s, %(failure_message)s, %(failure_traceback)s, %(failure_attempts)s,
       clock_timestamp()
FROM fence
ON CONFLICT (workflow) DO UPDATE SET
    status = EXCLUDED.status, attempts = EXCLUDED.attempts, owner = NULL, since = NULL,
    step = NULL, beat_at = NULL, until_at = EXCLUDED.until_at, waits = EXCLUDED.waits,
    value = EXCLUDED.value, failure_type = EXCLUDED.failure_type,
    failure_message = EXCLUDED.failure_message,
    failure_traceback = EXCLUDED.failure_traceback,
    failure_attempts = EXCLUDED.failure_attempts, updated_at = EXCLUDED.updated_at
RETURNING 1;

-- name: withdraw_fence
-- The first statement of a cancel: raise_fence, for a workflow that exists (a status row or
-- records), so that the pass in flight is refused at its next write. It takes the claim row
-- before withdraw_mark takes the status row, the lock order of this file. Raising the fence of
-- an already terminal workflow is harmless: nothing holds it, and the next claim outranks it.
INSERT INTO {schema}.workflow_claim AS held (workflow, token)
SELECT %(workflow)s, 1
WHERE EXISTS (SELECT 1 FROM {schema}.workflow_status WHERE workflow = %(workflow)s)
   OR EXISTS (SELECT 1 FROM {schema}.workflow_checkpoint WHERE workflow = %(workflow)s)
ON CONFLICT (workflow) DO UPDATE SET
    token = held.token + 1, claimed_at = NULL, live_until = NULL, budget_until = NULL,
    liveness = NULL;

-- name: withdraw_mark
-- Cancelled, unless already terminal (which is left as it is). A workflow with records and no
-- status row (made by a send without a start) gets one, with no kind.
INSERT INTO {schema}.workflow_status AS s (workflow, status, updated_at)
SELECT %(workflow)s, 'cancelled', clock_timestamp()
WHERE EXISTS (SELECT 1 FROM {schema}.workflow_status WHERE workflow = %(workflow)s)
   OR EXISTS (SELECT 1 FROM {schema}.workflow_checkpoint WHERE workflow = %(workflow)s)
ON CONFLICT (workflow) DO UPDATE SET
    status = 'cancelled', owner = NULL, since = NULL, step = NULL, beat_at = NULL,
    until_at = NULL, waits = NULL, updated_at = EXCLUDED.updated_at
WHERE s.status NOT IN ('finished', 'failed', 'cancelled');

-- name: readmit
-- Failed or cancelled becomes ready with fresh attempts; the records are kept, so the steps a
-- previous attempt recorded are not run again. Any other status: no row, nothing written.
UPDATE {schema}.workflow_status
SET status = 'ready', attempts = 0, owner = NULL, since = NULL, step = NULL, beat_at = NULL,
    until_at = NULL, waits = NULL, value = NULL, failure_type = NULL, failure_message = NULL,
    failure_traceback = NULL, failure_attempts = NULL, updated_at = clock_timestamp()
WHERE workflow = %(workflow)s AND status IN ('failed', 'cancelled')
RETURNING workflow;

-- name: readmit_queue
-- readmit and make_ready in one statement: the queue row is written only from the row the
-- readmit returned, so a retry that is refused queues nothing.
WITH readmitted AS (
    UPDATE {schema}.workflow_status
    SET status = 'ready', attempts = 0, owner = NULL, since = NULL, step = NULL, beat_at = NULL,
        until_at = NULL, waits = NULL, value = NULL, failure_type = NULL,
        failure_message = NULL, failure_traceback = NULL, failure_attempts = NULL,
        updated_at = clock_timestamp()
    WHERE workflow = %(workflow)s AND status IN ('failed', 'cancelled')
    RETURNING workflow
)
INSERT INTO {schema}.workflow_queue AS queued (workflow, visible_at, receipt)
SELECT workflow, clock_timestamp(), NULL FROM readmitted
ON CONFLICT (workflow) DO UPDATE SET
    visible_at = least(queued.visible_at, EXCLUDED.visible_at),
    receipt = NULL
RETURNING workflow;

-- name: forget_status
-- Part of a discard, after raise_fence: the workflow is forgotten, its status with it.
DELETE FROM {schema}.workflow_status WHERE workflow = %(workflow)s;

-- name: list_all
-- Newest updated first, from the cursor (the first page passes 'infinity'); each of the four
-- listings reads one index backwards from where the last page stopped. The claim is read by a
-- subquery per row returned, an index lookup each, so that the planner never joins a page of
-- ten against every claim in the store.
SELECT s.workflow, s.kind, s.input, s.queue, s.status, s.attempts, s.owner, s.since, s.step,
       s.until_at, s.waits, s.value, s.failure_type, s.failure_message, s.failure_traceback,
       s.failure_attempts, s.started_at, s.updated_at,
       (SELECT c.token FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL),
       (SELECT c.live_until FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL)
FROM {schema}.workflow_status AS s
WHERE (s.updated_at, s.workflow) < (%(at)s::timestamptz, %(after)s::text)
ORDER BY s.updated_at DESC, s.workflow DESC
LIMIT %(limit)s;

-- name: list_status
-- The filtered listings name their column as a range of one value and order by it, where
-- "= value" would read more simply, because the statements are prepared: after a few runs
-- Postgres plans them once for any value, and for a status it cannot see it guesses a
-- third of the table and prefers walking the (updated_at, workflow) index newest first,
-- filtering as it goes, which reads every finished workflow to find one failed one. A
-- range it must order by leaves only the index that starts with the column, read from the
-- cursor: a page costs its own rows at any size (the bench's --size row checks it).
SELECT s.workflow, s.kind, s.input, s.queue, s.status, s.attempts, s.owner, s.since, s.step,
       s.until_at, s.waits, s.value, s.failure_type, s.failure_message, s.failure_traceback,
       s.failure_attempts, s.started_at, s.updated_at,
       (SELECT c.token FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL),
       (SELECT c.live_until FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL)
FROM {schema}.workflow_status AS s
WHERE s.status >= %(status)s AND s.status <= %(status)s
  AND (s.status, s.updated_at, s.workflow) < (%(status)s, %(at)s::timestamptz, %(after)s::text)
ORDER BY s.status DESC, s.updated_at DESC, s.workflow DESC
LIMIT %(limit)s;

-- name: list_kind
SELECT s.workflow, s.kind, s.input, s.queue, s.status, s.attempts, s.owner, s.since, s.step,
       s.until_at, s.waits, s.value, s.failure_type, s.failure_message, s.failure_traceback,
       s.failure_attempts, s.started_at, s.updated_at,
       (SELECT c.token FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL),
       (SELECT c.live_until FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL)
FROM {schema}.workflow_status AS s
WHERE s.kind >= %(kind)s AND s.kind <= %(kind)s
  AND (s.kind, s.updated_at, s.workflow) < (%(kind)s, %(at)s::timestamptz, %(after)s::text)
ORDER BY s.kind DESC, s.updated_at DESC, s.workflow DESC
LIMIT %(limit)s;

-- name: list_kind_status
SELECT s.workflow, s.kind, s.input, s.queue, s.status, s.attempts, s.owner, s.since, s.step,
       s.until_at, s.waits, s.value, s.failure_type, s.failure_message, s.failure_traceback,
       s.failure_attempts, s.started_at, s.updated_at,
       (SELECT c.token FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL),
       (SELECT c.live_until FROM {schema}.workflow_claim AS c
        WHERE c.workflow = s.workflow AND s.status = 'running' AND c.live_until IS NOT NULL)
FROM {schema}.workflow_status AS s
WHERE s.kind >= %(kind)s AND s.kind <= %(kind)s
  AND s.status >= %(status)s AND s.status <= %(status)s
  AND (s.kind, s.status, s.updated_at, s.workflow)
      < (%(kind)s, %(status)s, %(at)s::timestamptz, %(after)s::text)
ORDER BY s.kind DESC, s.status DESC, s.updated_at DESC, s.workflow DESC
LIMIT %(limit)s;

-- name: migrate_backfill_2
-- Upgrading from version 1, inside migrate's transaction and under its lock: every workflow
-- with records or a queue row gets a status row with no kind and no attempts. Queued and
-- visible, or out with a taker: ready. Queued for later: sleeping until then. Not queued: its
-- body returned or it waits for a value, and nothing in version 1 says which; blocked is the
-- safe answer (an arrival still runs it, and a body run again replays to the same end), where
-- finished would strand a waiting one for good.
INSERT INTO {schema}.workflow_status AS s (workflow, status, until_at, updated_at)
SELECT w.workflow,
       CASE WHEN q.workflow IS NULL THEN 'blocked'
            WHEN q.receipt IS NOT NULL OR q.visible_at <= clock_timestamp() THEN 'ready'
            ELSE 'sleeping' END,
       CASE WHEN q.receipt IS NULL AND q.visible_at > clock_timestamp() THEN q.visible_at END,
       clock_timestamp()
FROM (
    SELECT workflow FROM {schema}.workflow_checkpoint
    UNION
    SELECT workflow FROM {schema}.workflow_queue
) AS w
LEFT JOIN {schema}.workflow_queue AS q ON q.workflow = w.workflow
ON CONFLICT (workflow) DO NOTHING;

-- name: has_records
-- Whether a workflow with no status row exists at all: made by a send or an arrive and never
-- started or run, it is waiting (so not retryable), where an id with no records is unknown.
SELECT EXISTS (SELECT 1 FROM {schema}.workflow_checkpoint WHERE workflow = %(workflow)s);
