-- Group commit's statements: a batch of writes of one kind as ONE multi-row statement, each
-- row deciding its own verdict exactly as the single-row statement of the same name in
-- statements.sql does (read the argument there). Connections.grouped sends them, inside one
-- transaction, in one round trip. Row n is the n-th write of the batch, in the batch's order
-- (by workflow, then arrival). Keep curly braces out of these comments.

-- name: record_batch
-- Each row is fenced on its own token (the join, FOR SHARE of its claim row, as in record),
-- takes its workflow's write lock after the fence and before its seq is drawn, and is
-- inserted first-writer-wins. DO NOTHING rather than record's do-nothing DO UPDATE, because an
-- UPDATE may not touch one row twice in a statement, and two writes of one key may share a
-- batch; the rows are inserted in order n, so the earlier of the two wins, as it would alone.
--
-- The answer, per row that passed its fence: the row already there when the statement began
-- if any (its conflict kept this statement from inserting the key), else the row this
-- statement inserted for its key, which is the first of the batch's rows with that key (rows
-- go in order n, so a later duplicate gets the earlier one's value, as it would alone): its
-- value is taken from that first row (first_value), and only whether the key was inserted is
-- looked up in what the INSERT returned, as a hashed subplan. Joining the answer to the
-- INSERT's returned rows instead was planned as a nested loop on a one-row estimate, every
-- row against every inserted row (0.2 of 1.1 ms of server time at 64 rows). A row that passed
-- its fence and finds neither lost its key to a write that committed while this statement ran
-- (invisible to its snapshot): known is false, and that write is asked again alone, which
-- reads the winner. No row for n: fenced.
--
-- The batch comes as one json array of rows [n, workflow, token, key, value, operation]
-- (operation null where none) rather than as six arrays: the client encodes it in one call
-- to the json module, where psycopg dumps an array element by element in Python, which
-- profiled as a fifth of a batch's cost on the client.
WITH input AS (
    SELECT (r->>0)::int AS n, r->>1 AS workflow, (r->>2)::bigint AS token,
           r->>3 AS key, r->>4 AS value, r->>5 AS operation
    FROM json_array_elements(%(rows)s::json) AS e(r)
), fence AS (
    SELECT i.n, i.workflow, i.key, i.value, i.operation
    FROM input i
    JOIN {schema}.workflow_claim c ON c.workflow = i.workflow AND c.token = i.token
    ORDER BY i.n
    FOR SHARE OF c
), ordered AS (
    SELECT n, workflow, key, value, operation,
           pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || workflow, 0))
    FROM fence
    ORDER BY n
), inserted AS (
    INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, operation)
    SELECT workflow, key, value, operation FROM ordered ORDER BY n
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING workflow, key
), firsts AS (
    SELECT n, workflow, key,
           first_value(value) OVER w AS value, first_value(operation) OVER w AS operation
    FROM fence
    WINDOW w AS (PARTITION BY workflow, key ORDER BY n)
)
SELECT f.n,
       held.workflow IS NOT NULL
           OR (f.workflow, f.key) IN (SELECT workflow, key FROM inserted) AS known,
       CASE WHEN held.workflow IS NULL THEN f.value ELSE held.value END AS value,
       CASE WHEN held.workflow IS NULL THEN f.operation ELSE held.operation END AS operation
FROM firsts f
LEFT JOIN {schema}.workflow_checkpoint held ON held.workflow = f.workflow AND held.key = f.key;

-- name: renew_batch
-- renew, once per row: a row whose token no longer matches, or whose budget is spent, updates
-- nothing and is not returned (its caller raises Fenced). Two renewals of one pass in a batch
-- match one claim row, which UPDATE ... FROM updates once; both read its one returned row.
UPDATE {schema}.workflow_claim c
SET live_until = least(clock_timestamp() + c.liveness, c.budget_until)
FROM unnest(%(workflow)s::text[], %(token)s::bigint[]) AS i(workflow, token)
WHERE c.workflow = i.workflow
  AND c.token = i.token
  AND c.budget_until > clock_timestamp()
RETURNING c.workflow, c.token;

-- name: release_batch
-- release, once per row, after the batch's records (so a record sent before its pass let go
-- still lands, as it would have had it committed first). The workflows' claim rows are
-- locked in the batch's order before any is updated. Every released claim's workflow
-- comes back; release's caller reads nothing, and a stale holder's row matches nothing and
-- frees nothing. Two releases of one pass in a batch match one row, updated once.
WITH input AS (
    SELECT (r->>0)::int AS n, r->>1 AS workflow, (r->>2)::bigint AS token
    FROM json_array_elements(%(rows)s::json) AS e(r)
), locked AS (
    SELECT c.workflow, c.token
    FROM input i
    JOIN {schema}.workflow_claim c ON c.workflow = i.workflow AND c.token = i.token
    ORDER BY i.n
    FOR NO KEY UPDATE OF c
)
UPDATE {schema}.workflow_claim c
SET token = c.token + 1, claimed_at = NULL, live_until = NULL, budget_until = NULL,
    liveness = NULL
FROM (SELECT DISTINCT workflow, token FROM locked) l
WHERE c.workflow = l.workflow AND c.token = l.token
RETURNING c.workflow;

-- name: claim_batch
-- claim, once per row, last in the batch (after its releases: a pass that let go of a
-- workflow in the same batch has let go before another claims it). One upsert in the
-- batch's order, so the claim rows are locked in that order; the clock is read once, as in
-- claim. Each workflow claimed comes back with its new token; a workflow held by a live
-- pass does not (its caller gets None). Two claims of one workflow in a batch make the
-- upsert fail (a row may not be updated twice in one statement): nothing of the batch is
-- written, and it is sent again as single-row statements, where the second claim finds
-- the first's. liveness and budget come as interval text, days, seconds and microseconds
-- apart, as psycopg writes an interval, so the arithmetic is claim's own.
WITH input AS (
    SELECT (r->>0)::int AS n, r->>1 AS workflow,
           (r->>2)::interval AS liveness, (r->>3)::interval AS budget
    FROM json_array_elements(%(rows)s::json) AS e(r)
)
INSERT INTO {schema}.workflow_claim AS held
    (workflow, token, claimed_at, live_until, budget_until, liveness)
SELECT i.workflow, 1, now.t, least(now.t + i.liveness, now.t + i.budget),
       now.t + i.budget, i.liveness
FROM input i, (SELECT clock_timestamp() AS t) AS now
ORDER BY i.n
ON CONFLICT (workflow) DO UPDATE SET
    token = held.token + 1,
    claimed_at = EXCLUDED.claimed_at,
    live_until = EXCLUDED.live_until,
    budget_until = EXCLUDED.budget_until,
    liveness = EXCLUDED.liveness
WHERE held.live_until IS NULL
   OR held.live_until <= EXCLUDED.claimed_at
   OR held.budget_until <= EXCLUDED.claimed_at
RETURNING workflow, token;

-- name: history_batch
-- history, for every workflow named, in one read: each workflow's rows in seq order, as
-- history returns them, the workflows one after another. Reads that arrive while one is on
-- its way go together (Connections.history); a read takes no lock and commits nothing.
SELECT workflow, key, value, at, operation
FROM {schema}.workflow_checkpoint
WHERE workflow = ANY(%(workflows)s::text[])
  AND left(key, char_length({sent_prefix})) <> {sent_prefix}
ORDER BY workflow, seq;
