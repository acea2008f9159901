-- Every statement the store runs, each under a "-- name:" line that the Python side looks
-- it up by. Parameters are named; moments and durations are INTEGER microseconds (see
-- schema.sql).
--
-- :now is the store's clock at the statement. By default that is SQLite's own: the "now"
-- statement below is written in place of :now, as a subquery, so each statement reads
-- the clock as it writes, under the write lock. A store given a Clock (a ManualClock in
-- tests) binds :now to its reading instead, taken inside the same transaction.
--
-- Each guarantee is one statement where one statement can carry it, for the reason the
-- design gives for Redis scripts: split a check from the write it guards and the gap is
-- where the guarantee leaks. Where a move needs two statements (transact, discard, and
-- the Durable's cross-table moves) they share one transaction, and SQLite's single writer
-- makes that transaction the unit.


-- name: now
-- SQLite's own clock. julianday('now') is the VFS's clock in whole milliseconds, and
-- stays fixed for the length of one statement; rounding the day fraction back to
-- milliseconds undoes the float division that made it.
SELECT CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000;


-- Checkpointer ------------------------------------------------------------------------

-- name: load
-- Every record but the message-id markers append leaves (keys starting with :sent, which is
-- durable.interfaces.SENT_PREFIX): those are the store's bookkeeping, not records.
SELECT key, value FROM durable_checkpoint
WHERE workflow = :workflow AND substr(key, 1, length(:sent)) <> :sent
ORDER BY seq;

-- name: history
SELECT key, value, recorded_at, operation FROM durable_checkpoint
WHERE workflow = :workflow AND substr(key, 1, length(:sent)) <> :sent
ORDER BY seq;

-- name: workflows
-- Ids in order, distinct by walking the UNIQUE (workflow, key) index. LIMIT -1 is no limit.
SELECT DISTINCT workflow FROM durable_checkpoint ORDER BY workflow LIMIT :limit;

-- name: token
SELECT token, budget_until FROM durable_claim WHERE workflow = :workflow;

-- name: claimed
-- The claim while a pass holds it: not released, and both deadlines still ahead.
SELECT token, live_until, budget_until FROM durable_claim
WHERE workflow = :workflow AND live_until IS NOT NULL
  AND :now < live_until AND :now < budget_until;

-- name: claim
-- Checking that the workflow is free and taking it are one statement. A first claim
-- inserts token 1; otherwise the conflict raises the token only where the WHERE finds the
-- claim free (released, or either deadline passed), and a held claim returns no row.
INSERT INTO durable_claim (workflow, token, live_until, budget_until, liveness)
VALUES (:workflow, 1, min(:now + :liveness, :now + :budget), :now + :budget, :liveness)
ON CONFLICT (workflow) DO UPDATE SET
    token = token + 1,
    live_until = excluded.live_until,
    budget_until = excluded.budget_until,
    liveness = excluded.liveness
WHERE live_until IS NULL OR :now >= live_until OR :now >= budget_until
RETURNING token;

-- name: renew
-- Liveness moves forward by the claim's own window and never past its budget. A holder
-- that is superseded, released or out of budget matches nothing.
UPDATE durable_claim
SET live_until = min(:now + liveness, budget_until)
WHERE workflow = :workflow AND token = :token
  AND budget_until IS NOT NULL AND :now < budget_until
RETURNING token;

-- name: release
-- Raising the token on release means the released pass cannot write again and the next
-- claim still outranks it. A stale holder's token matches nothing, so it frees nothing.
UPDATE durable_claim
SET token = token + 1, live_until = NULL, budget_until = NULL
WHERE workflow = :workflow AND token = :token;

-- name: record
-- Fencing and first-writer-wins in one statement. The SELECT yields a row only while the
-- holder's token is the highest issued, so a fenced write inserts nothing; a key already
-- recorded meets the UNIQUE (workflow, key) row and inserts nothing either, leaving the
-- first value, its seq and its recorded_at as they were. (The WHERE is also what lets
-- SQLite parse ON CONFLICT after a SELECT.) The caller tells which by the change count:
-- one row is the common case, a write that won, and needs nothing more; no row sends it
-- to record_outcome, in the same transaction. Not the DO UPDATE ... RETURNING that
-- supply uses: RETURNING costs more on a step's path than the rest of the statement
-- (hatch run bench), to hand back a value that only the rare losing write needs.
INSERT INTO durable_checkpoint (workflow, key, value, recorded_at, operation)
SELECT :workflow, :key, :value, :now, :operation
FROM durable_claim
WHERE workflow = :workflow AND token = :token
ON CONFLICT (workflow, key) DO NOTHING;

-- name: record_outcome
-- Why a record inserted nothing: the claim's token (and its budget, for the message), and
-- the value already under the key and the operation that wrote it, read in the record's
-- transaction after its insert (so a key reused as another operation is refused in it).
SELECT c.token, c.budget_until, r.value, r.operation
FROM (SELECT :workflow AS workflow) AS w
LEFT JOIN durable_claim AS c ON c.workflow = w.workflow
LEFT JOIN durable_checkpoint AS r ON r.workflow = w.workflow AND r.key = :key;

-- name: supply
-- First-writer-wins with no claim, unfenced: the upsert whose no-op DO UPDATE hands back
-- the value already there (or the one just written) in the same statement.
INSERT INTO durable_checkpoint (workflow, key, value, recorded_at, operation)
VALUES (:workflow, :key, :value, :now, :operation)
ON CONFLICT (workflow, key) DO UPDATE SET value = value
RETURNING value;

-- name: supply_at
-- supply with the time given (durable.interfaces.Dated, for an import) in place of the
-- store's clock: a losing write keeps the first writer's value and recorded_at alike.
INSERT INTO durable_checkpoint (workflow, key, value, recorded_at)
VALUES (:workflow, :key, :value, :at)
ON CONFLICT (workflow, key) DO UPDATE SET value = value
RETURNING value;

-- name: lookup
SELECT value, operation FROM durable_checkpoint WHERE workflow = :workflow AND key = :key;

-- name: append
-- The key is the next seq, read inside the insert and written as both the row's seq and
-- its inbox key, so the key order and the load order are one number and cannot disagree.
-- Reading the maximum inside an insert is atomic here because SQLite admits one writer at
-- a time. :prefix and the zero-padded width are durable.interfaces.inbox_key's (a test
-- holds the two to the same spelling).
INSERT INTO durable_checkpoint (seq, workflow, key, value, recorded_at)
SELECT next.seq, :workflow, :prefix || printf('%020d', next.seq), :value, :now
FROM (SELECT coalesce(max(seq), 0) + 1 AS seq FROM durable_checkpoint) AS next
WHERE true
RETURNING key;

-- name: append_at
-- append with the time given (Dated), numbered exactly as append numbers.
INSERT INTO durable_checkpoint (seq, workflow, key, value, recorded_at)
SELECT next.seq, :workflow, :prefix || printf('%020d', next.seq), :value, :at
FROM (SELECT coalesce(max(seq), 0) + 1 AS seq FROM durable_checkpoint) AS next
WHERE true
RETURNING key;

-- name: sent
-- The inbox key an append with this message id got, if one did: the marker append_mark wrote.
SELECT value FROM durable_checkpoint WHERE workflow = :workflow AND key = :sent || :message_id;

-- name: append_mark
-- Remembers a message id, in the transaction of the append it names, holding that append's
-- inbox key as plain text (not a codec encoding: it is never a record). BEGIN IMMEDIATE makes
-- the transaction the only writer, so reading the marker with "sent" and writing it here
-- cannot be raced; UNIQUE (workflow, key) would refuse a second marker regardless.
INSERT INTO durable_checkpoint (workflow, key, value, recorded_at)
VALUES (:workflow, :sent || :message_id, :key, :now);

-- name: forget
-- The records and the message-id markers alike.
DELETE FROM durable_checkpoint WHERE workflow = :workflow;

-- name: raise_fence
-- discard keeps the claim row and takes its token up, freeing it: a pass in flight is
-- refused at its next write and the id is claimable at once, with a higher token.
INSERT INTO durable_claim (workflow, token, live_until, budget_until, liveness)
VALUES (:workflow, 1, NULL, NULL, 0)
ON CONFLICT (workflow) DO UPDATE SET token = token + 1, live_until = NULL, budget_until = NULL;


-- Scheduler ---------------------------------------------------------------------------

-- name: make_ready
-- Runnable now, and never later than it already was: a workflow already waiting in line
-- keeps its place. Clearing the receipt is what a newer wakeup wins by.
INSERT INTO durable_queue (workflow, visible_at, receipt) VALUES (:workflow, :now, NULL)
ON CONFLICT (workflow) DO UPDATE SET
    visible_at = min(visible_at, excluded.visible_at),
    receipt = NULL;

-- name: due
-- Whether any row is runnable, read without the write lock, so an idle poll never queues
-- behind writers.
SELECT EXISTS (SELECT 1 FROM durable_queue WHERE visible_at <= :now);

-- name: take
-- The earliest visible row, hidden for the lease under a fresh receipt, in one statement.
UPDATE durable_queue
SET visible_at = :now + :lease, receipt = :receipt
WHERE workflow = (
    SELECT workflow FROM durable_queue
    WHERE visible_at <= :now
    ORDER BY visible_at, workflow
    LIMIT 1
)
RETURNING workflow;

-- name: due_in
-- As due, counting only the rows of the queues served (:queues, a JSON array). A workflow
-- without a lifecycle row is in the queue 'default'.
SELECT EXISTS (
    SELECT 1 FROM durable_queue AS q
    LEFT JOIN durable_workflow AS w ON w.workflow = q.workflow
    WHERE q.visible_at <= :now
      AND coalesce(w.queue, 'default') IN (SELECT value FROM json_each(:queues))
);

-- name: take_in
-- As take, choosing only among the rows of the queues served: the queue is read from the
-- lifecycle row in the same statement that hides the row, so no row of another queue is
-- ever taken and put back.
UPDATE durable_queue
SET visible_at = :now + :lease, receipt = :receipt
WHERE workflow = (
    SELECT q.workflow FROM durable_queue AS q
    LEFT JOIN durable_workflow AS w ON w.workflow = q.workflow
    WHERE q.visible_at <= :now
      AND coalesce(w.queue, 'default') IN (SELECT value FROM json_each(:queues))
    ORDER BY q.visible_at, q.workflow
    LIMIT 1
)
RETURNING workflow;

-- name: limited
-- Whether the take must mind limits: a queue limit or a priority is kept. Read under the
-- take's write lock; with neither (the store of someone who never limits), the take is the
-- plain one above.
SELECT EXISTS (SELECT 1 FROM durable_limit) OR EXISTS (SELECT 1 FROM durable_priority);

-- name: take_limited
-- As take and take_in (:queues NULL: every queue), passing over the rows of a queue at its
-- limit: as many live slots as its concurrent, or as many hand-outs in the last second as
-- its rate. A workflow holding a live slot is not handed out again (its pass runs, and
-- holds it). Highest priority first, then earliest visible. The slot and the hand-out are
-- written by take_slot and count_handout in the same transaction; SQLite's one writer makes
-- the count and the writes one step, so two takers never both see the last slot free.
UPDATE durable_queue
SET visible_at = :now + :lease, receipt = :receipt
WHERE workflow = (
    SELECT q.workflow FROM durable_queue AS q
    LEFT JOIN durable_workflow AS w ON w.workflow = q.workflow
    LEFT JOIN durable_limit AS l ON l.queue = coalesce(w.queue, 'default')
    LEFT JOIN durable_priority AS p ON p.workflow = q.workflow
    WHERE q.visible_at <= :now
      AND (:queues IS NULL
           OR coalesce(w.queue, 'default') IN (SELECT value FROM json_each(:queues)))
      AND NOT EXISTS (
          SELECT 1 FROM durable_slot AS mine
          WHERE mine.workflow = q.workflow AND mine.live_until > :now
      )
      AND (l.concurrent IS NULL OR l.concurrent > (
          SELECT count(*) FROM durable_slot AS s
          WHERE s.queue = l.queue AND s.live_until > :now
      ))
      AND (l.rate IS NULL OR l.rate > (
          SELECT count(*) FROM durable_handout AS h
          WHERE h.queue = l.queue AND h.at > :now - 1000000
      ))
    ORDER BY coalesce(p.priority, 0) DESC, q.visible_at, q.workflow
    LIMIT 1
)
RETURNING workflow;

-- name: take_slot
-- The slot of the delivery just taken, when its queue has a concurrency limit: live for
-- the lease, as the delivery is hidden, until hold pushes it on.
INSERT INTO durable_slot (workflow, queue, receipt, live_until)
SELECT :workflow, l.queue, :receipt, :now + :lease
FROM durable_limit AS l
WHERE l.queue = coalesce(
    (SELECT w.queue FROM durable_workflow AS w WHERE w.workflow = :workflow), 'default'
) AND l.concurrent IS NOT NULL
ON CONFLICT (workflow) DO UPDATE SET
    queue = excluded.queue, receipt = excluded.receipt, live_until = excluded.live_until;

-- name: count_handout
INSERT INTO durable_handout (queue, at)
SELECT l.queue, :now
FROM durable_limit AS l
WHERE l.queue = coalesce(
    (SELECT w.queue FROM durable_workflow AS w WHERE w.workflow = :workflow), 'default'
) AND l.rate IS NOT NULL;

-- name: prune_handouts
DELETE FROM durable_handout WHERE at <= :now - 1000000;

-- name: return_slot
-- Answering for a delivery gives its slot back; a newer delivery's slot has another receipt.
DELETE FROM durable_slot WHERE workflow = :workflow AND receipt = :receipt;

-- name: cancel_slot
DELETE FROM durable_slot WHERE workflow = :workflow;

-- name: hold
-- Only a live slot of this very delivery: a lapsed one may be another's by now.
UPDATE durable_slot SET live_until = :now + :liveness
WHERE workflow = :workflow AND receipt = :receipt AND live_until > :now;

-- name: held
SELECT count(*) FROM durable_slot WHERE queue = :queue AND live_until > :now;

-- name: set_limit
INSERT INTO durable_limit (queue, concurrent, rate) VALUES (:queue, :concurrent, :rate)
ON CONFLICT (queue) DO UPDATE SET concurrent = excluded.concurrent, rate = excluded.rate;

-- name: clear_limit
DELETE FROM durable_limit WHERE queue = :queue;

-- name: limits
SELECT queue, concurrent, rate FROM durable_limit ORDER BY queue;

-- name: prioritize
INSERT INTO durable_priority (workflow, priority) VALUES (:workflow, :priority)
ON CONFLICT (workflow) DO UPDATE SET priority = excluded.priority;

-- name: unprioritize
DELETE FROM durable_priority WHERE workflow = :workflow;

-- name: wake_at
-- Answers for the delivery only while its receipt is the row's: a make_ready since then
-- cleared it, and a cancel since then deleted the row.
UPDATE durable_queue SET visible_at = :when, receipt = NULL
WHERE workflow = :workflow AND receipt = :receipt;

-- name: done
DELETE FROM durable_queue WHERE workflow = :workflow AND receipt = :receipt;

-- name: cancel
DELETE FROM durable_queue WHERE workflow = :workflow;

-- name: scheduled
SELECT visible_at FROM durable_queue WHERE workflow = :workflow;
