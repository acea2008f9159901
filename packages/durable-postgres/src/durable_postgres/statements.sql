-- Every statement the stores send, one per "-- name:" section. Each guarantee is one statement,
-- or one transaction of statements sent together, never a read followed by a write in a second
-- round trip: the gap between the two is where a guarantee leaks.
--
-- Times are the server's: clock_timestamp() is the moment the statement reads it, which is the
-- clock every lease is measured by and every record is stamped with, whichever machine wrote.
--
-- The schema arrives as a quoted identifier and the inbox and sent prefixes as literals, all
-- filled in by psycopg.sql; values arrive as named parameters. Keep curly braces out of these
-- comments.

-- name: load
-- Every record but the message-id markers append_once leaves (keys starting with the sent
-- prefix): those are the store's bookkeeping, not records.
SELECT key, value
FROM {schema}.workflow_checkpoint
WHERE workflow = %(workflow)s AND left(key, char_length({sent_prefix})) <> {sent_prefix}
ORDER BY seq;

-- name: history
SELECT key, value, at, operation
FROM {schema}.workflow_checkpoint
WHERE workflow = %(workflow)s AND left(key, char_length({sent_prefix})) <> {sent_prefix}
ORDER BY seq;

-- name: workflows
-- LIMIT NULL is no limit, so one statement serves both.
SELECT DISTINCT workflow
FROM {schema}.workflow_checkpoint
ORDER BY workflow
LIMIT %(limit)s;

-- name: claimed
-- For operators: the live claim, if any, by the same test of the deadlines that claim uses.
SELECT token, live_until, budget_until
FROM {schema}.workflow_claim
WHERE workflow = %(workflow)s
  AND live_until > clock_timestamp()
  AND budget_until > clock_timestamp();

-- name: claim
-- Checking that the workflow is free and taking it are one upsert: the DO UPDATE runs only when
-- its WHERE finds the old claim released or past a deadline, so two claimants racing on one row
-- serialise on its lock and the second sees the first's deadlines and returns no row. The clock
-- is read once, into claimed_at, so the new deadlines and the test of the old ones agree.
INSERT INTO {schema}.workflow_claim AS held
    (workflow, token, claimed_at, live_until, budget_until, liveness)
SELECT %(workflow)s, 1, now.t, least(now.t + %(liveness)s, now.t + %(budget)s),
       now.t + %(budget)s, %(liveness)s
FROM (SELECT clock_timestamp() AS t) AS now
ON CONFLICT (workflow) DO UPDATE SET
    token = held.token + 1,
    claimed_at = EXCLUDED.claimed_at,
    live_until = EXCLUDED.live_until,
    budget_until = EXCLUDED.budget_until,
    liveness = EXCLUDED.liveness
WHERE held.live_until IS NULL
   OR held.live_until <= EXCLUDED.claimed_at
   OR held.budget_until <= EXCLUDED.claimed_at
RETURNING token;

-- name: renew
-- No row back means the holder was superseded, released, or has spent its budget.
UPDATE {schema}.workflow_claim
SET live_until = least(clock_timestamp() + liveness, budget_until)
WHERE workflow = %(workflow)s
  AND token = %(token)s
  AND budget_until > clock_timestamp()
RETURNING token;

-- name: release
-- Raising the token, rather than only clearing the deadlines, is what refuses the released
-- pass's own later writes. A stale holder's token matches nothing, so it frees nothing.
UPDATE {schema}.workflow_claim
SET token = token + 1, claimed_at = NULL, live_until = NULL, budget_until = NULL, liveness = NULL
WHERE workflow = %(workflow)s AND token = %(token)s;

-- name: fence
-- Why a write was refused: read only after a guarded statement returned no row, to word the
-- error. The refusal itself was decided inside that statement.
SELECT token, live_until IS NULL AS released, budget_until <= clock_timestamp() AS spent
FROM {schema}.workflow_claim
WHERE workflow = %(workflow)s;

-- name: record
-- The fence check and the insert are one statement. FOR SHARE holds the claim row until this
-- statement commits, so a newer claim (which updates that row) waits for the record to land,
-- and a record that waited for a newer claim re-reads the row and finds the token moved.
-- Either way a pass that claims after a record has returned sees it.
--
-- The DO UPDATE changes nothing (key is set to itself), and exists so that RETURNING hands back
-- the row already there: first-writer-wins and "who won" in one round trip. It touches neither
-- seq nor at, so a losing write moves the record neither in order nor in time.
--
-- ordered takes the workflow's write lock (see order_writes) after the fence and before the
-- row's seq is drawn, so seq order is the order the writes commit in.
WITH fence AS (
    SELECT workflow
    FROM {schema}.workflow_claim
    WHERE workflow = %(workflow)s AND token = %(token)s
    FOR SHARE
), ordered AS (
    SELECT workflow, pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || workflow, 0))
    FROM fence
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, operation)
SELECT workflow, %(key)s, %(value)s, %(operation)s FROM ordered
ON CONFLICT (workflow, key) DO UPDATE SET key = EXCLUDED.key
RETURNING value, operation;

-- name: supply
-- First-writer-wins from outside a pass: no fence, so a running pass never blocks it. It takes
-- the workflow's write lock before its seq is drawn, as record does.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
)
INSERT INTO {schema}.workflow_checkpoint AS held (workflow, key, value)
SELECT %(workflow)s, %(key)s, %(value)s FROM ordered
ON CONFLICT (workflow, key) DO UPDATE SET key = EXCLUDED.key
RETURNING value;

-- name: supply_at
-- supply with the time given (durable.interfaces.Dated, for an import) in place of the
-- server's clock: a losing write keeps the first writer's value and at alike.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
)
INSERT INTO {schema}.workflow_checkpoint AS held (workflow, key, value, at)
SELECT %(workflow)s, %(key)s, %(value)s, %(at)s FROM ordered
ON CONFLICT (workflow, key) DO UPDATE SET key = EXCLUDED.key
RETURNING value;

-- name: append_at
-- append with the time given (Dated), numbered exactly as append numbers.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
), drawn AS (
    SELECT nextval({checkpoint_seq}::regclass) AS seq FROM ordered
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, seq, at)
SELECT %(workflow)s, {inbox_prefix} || lpad(drawn.seq::text, 20, '0'), %(value)s, drawn.seq,
       %(at)s
FROM drawn
RETURNING key;

-- name: append_once_at
-- append_once with the time given (Dated) on the entry; the marker, never read as a record,
-- keeps the server's clock.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
), drawn AS (
    SELECT nextval({checkpoint_seq}::regclass) AS seq FROM ordered
), marked AS (
    INSERT INTO {schema}.workflow_checkpoint (workflow, key, value)
    SELECT %(workflow)s, {sent_prefix} || %(message_id)s::text,
           {inbox_prefix} || lpad(drawn.seq::text, 20, '0')
    FROM drawn
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, seq, at)
SELECT %(workflow)s, marked.value, %(value)s, drawn.seq, %(at)s
FROM marked, drawn
RETURNING key;

-- name: append
-- One nextval, written as both the inbox key and the seq, so the key's order and load's order
-- are one order. The key pads the number to 20 digits, as durable.interfaces.inbox_key does.
-- The number is drawn under the workflow's write lock, as record's is.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
), drawn AS (
    SELECT nextval({checkpoint_seq}::regclass) AS seq FROM ordered
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, seq)
SELECT %(workflow)s, {inbox_prefix} || lpad(drawn.seq::text, 20, '0'), %(value)s, drawn.seq
FROM drawn
RETURNING key;

-- name: append_once
-- An append with a message id, in one statement: the marker (sent prefix || message id, holding
-- the entry's inbox key as plain text) is inserted first, and the entry only for a marker that
-- landed, so the marker's first-writer-wins decides the race. A second append with the id meets
-- the marker's (workflow, key) row; one still in flight in another transaction makes it wait for
-- that commit, after which DO NOTHING returns no row, the entry's SELECT finds nothing to insert,
-- and the statement writes nothing at all. As in append, one nextval is both the entry's seq and
-- the number in its key; the marker takes a number of its own, which only leaves a gap.
WITH ordered AS (
    SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0))
), drawn AS (
    SELECT nextval({checkpoint_seq}::regclass) AS seq FROM ordered
), marked AS (
    INSERT INTO {schema}.workflow_checkpoint (workflow, key, value)
    SELECT %(workflow)s, {sent_prefix} || %(message_id)s::text,
           {inbox_prefix} || lpad(drawn.seq::text, 20, '0')
    FROM drawn
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING value
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, seq)
SELECT %(workflow)s, marked.value, %(value)s, drawn.seq
FROM marked, drawn
RETURNING key;

-- name: sent
-- The inbox key an append with this message id got: sent after append_once in the same
-- transaction, whose new snapshot sees the marker whether this transaction wrote it or the one
-- append_once waited for did. No row only if a discard removed the marker in between.
SELECT value
FROM {schema}.workflow_checkpoint
WHERE workflow = %(workflow)s AND key = {sent_prefix} || %(message_id)s::text;

-- name: raise_fence
-- The first statement of a discard: it takes the claim row's lock before the records are
-- deleted, so a record in flight either landed before it (and the delete, reading afterwards,
-- removes it) or waits for it and finds the token moved. The claim row stays, with a higher
-- token and no deadlines, so the id is claimable at once and outranks every pass before it.
INSERT INTO {schema}.workflow_claim AS held (workflow, token)
VALUES (%(workflow)s, 1)
ON CONFLICT (workflow) DO UPDATE SET
    token = held.token + 1, claimed_at = NULL, live_until = NULL, budget_until = NULL,
    liveness = NULL;

-- name: order_writes
-- The workflow's write lock, held to the end of the transaction. Every statement that adds a
-- record takes it before the record's seq is drawn, and a discard takes it before it deletes.
-- Without it, seq (drawn when a statement runs) and commit order disagree between two
-- connections: a reader sees a record, and a later reader sees another one that committed
-- after it placed before it; and a discard deletes what its snapshot saw while a write that
-- committed during it survives, though a reader saw the two together. The lock is per
-- workflow (a hash of the schema and id; two ids sharing a hash only wait for each other), and
-- only ever taken after the claim row's lock, never before it.
SELECT pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || %(workflow)s, 0));

-- name: forget
-- The last statement of a discard's own, in the same transaction; under READ COMMITTED it
-- reads afresh, after raise_fence took the claim row and order_writes the write lock, so
-- nothing a fenced pass wrote, and nothing anyone committed before it, survives it. The
-- message-id markers go with the records.
DELETE FROM {schema}.workflow_checkpoint WHERE workflow = %(workflow)s;

-- name: transact_check
-- The first statement of a transact, inside its transaction: the current token and whatever the
-- key holds. It decides whether the effect runs at all; it takes no lock, so an effect that
-- stalls never stops a newer pass from claiming. transact_record decides the rest.
SELECT (SELECT token FROM {schema}.workflow_claim WHERE workflow = %(workflow)s),
       (SELECT value FROM {schema}.workflow_checkpoint
        WHERE workflow = %(workflow)s AND key = %(key)s),
       (SELECT operation FROM {schema}.workflow_checkpoint
        WHERE workflow = %(workflow)s AND key = %(key)s);

-- name: transact_record
-- The last statement of a transact, after the effect. The same fence as record, but DO NOTHING
-- on a conflict: a value supplied from outside while the effect ran means the effect's result
-- is not the record, so no row comes back and the whole transaction, effect included, is
-- rolled back. The write lock is taken as record takes it.
WITH fence AS (
    SELECT workflow
    FROM {schema}.workflow_claim
    WHERE workflow = %(workflow)s AND token = %(token)s
    FOR SHARE
), ordered AS (
    SELECT workflow, pg_advisory_xact_lock(hashtextextended({schema_name} || ':' || workflow, 0))
    FROM fence
)
INSERT INTO {schema}.workflow_checkpoint (workflow, key, value, operation)
SELECT workflow, %(key)s, %(value)s, 'transact' FROM ordered
ON CONFLICT (workflow, key) DO NOTHING
RETURNING value;

-- name: make_ready
-- Runnable now. Clearing the receipt is what keeps the delivery that is out (if any) from
-- undoing this wakeup when it answers. least() keeps a row that was already waiting in its
-- place, so a burst of wakeups never pushes a workflow behind those that arrived after it.
INSERT INTO {schema}.workflow_queue AS queued (workflow, visible_at, receipt)
VALUES (%(workflow)s, clock_timestamp(), NULL)
ON CONFLICT (workflow) DO UPDATE SET
    visible_at = least(queued.visible_at, EXCLUDED.visible_at),
    receipt = NULL;

-- name: take
-- Choosing the earliest visible row and hiding it for the lease is one statement. SKIP LOCKED
-- lets concurrent takers pass over a row another is taking instead of queueing behind it; the
-- lease and the receipt are written into the row taken. Takes nothing once a queue limit or a
-- priority is kept, and says so in its third column (always one row), so the caller takes by
-- take_candidate instead: a store that limits nothing pays no round trip more.
WITH flags AS (
    SELECT EXISTS (SELECT 1 FROM {schema}.queue_limit)
        OR EXISTS (SELECT 1 FROM {schema}.workflow_priority) AS limited
), next AS (
    SELECT workflow
    FROM {schema}.workflow_queue
    WHERE visible_at <= clock_timestamp() AND NOT (SELECT limited FROM flags)
    ORDER BY visible_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE {schema}.workflow_queue AS queued
    SET visible_at = clock_timestamp() + %(lease)s,
        receipt = nextval({queue_receipt}::regclass)
    FROM next
    WHERE queued.workflow = next.workflow
    RETURNING queued.workflow, queued.receipt
)
SELECT taken.workflow, taken.receipt, flags.limited FROM flags LEFT JOIN taken ON true;

-- name: take_in
-- As take, choosing only among the rows of the queues served (%(queues)s, a text[]). The queue
-- is read from the lifecycle row inside the same statement, so no row of another queue is ever
-- taken and put back; a workflow without a lifecycle row is in the queue 'default'.
WITH flags AS (
    SELECT EXISTS (SELECT 1 FROM {schema}.queue_limit)
        OR EXISTS (SELECT 1 FROM {schema}.workflow_priority) AS limited
), next AS (
    SELECT q.workflow
    FROM {schema}.workflow_queue AS q
    WHERE q.visible_at <= clock_timestamp()
      AND NOT (SELECT limited FROM flags)
      AND coalesce(
          (SELECT s.queue FROM {schema}.workflow_status AS s WHERE s.workflow = q.workflow),
          'default'
      ) = ANY(%(queues)s::text[])
    ORDER BY q.visible_at
    LIMIT 1
    FOR UPDATE OF q SKIP LOCKED
), taken AS (
    UPDATE {schema}.workflow_queue AS queued
    SET visible_at = clock_timestamp() + %(lease)s,
        receipt = nextval({queue_receipt}::regclass)
    FROM next
    WHERE queued.workflow = next.workflow
    RETURNING queued.workflow, queued.receipt
)
SELECT taken.workflow, taken.receipt, flags.limited FROM flags LEFT JOIN taken ON true;

-- name: take_candidate
-- The take under limits, first half: the visible row to hand out, highest priority first,
-- passing over a queue at its limit (as many live slots as its concurrent, or as many
-- hand-outs in the last second as its rate) and a workflow whose own slot is live (its pass
-- runs and holds it). %(queues)s is NULL for every queue. Row-locked (SKIP LOCKED) so no
-- other taker chooses it; the counts here only narrow the choice, and limit_room decides
-- them again under the queue's lock.
SELECT q.workflow, coalesce(st.queue, 'default'), l.concurrent, l.rate
FROM {schema}.workflow_queue AS q
LEFT JOIN {schema}.workflow_status AS st ON st.workflow = q.workflow
LEFT JOIN {schema}.queue_limit AS l ON l.queue = coalesce(st.queue, 'default')
LEFT JOIN {schema}.workflow_priority AS p ON p.workflow = q.workflow
WHERE q.visible_at <= clock_timestamp()
  AND (%(queues)s::text[] IS NULL OR coalesce(st.queue, 'default') = ANY(%(queues)s::text[]))
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.queue_slot AS mine
      WHERE mine.workflow = q.workflow AND mine.live_until > clock_timestamp()
  )
  AND (l.concurrent IS NULL OR l.concurrent > (
      SELECT count(*) FROM {schema}.queue_slot AS s
      WHERE s.queue = l.queue AND s.live_until > clock_timestamp()
  ))
  AND (l.rate IS NULL OR l.rate > (
      SELECT count(*) FROM {schema}.queue_handout AS h
      WHERE h.queue = l.queue AND h.at > clock_timestamp() - interval '1 second'
  ))
ORDER BY coalesce(p.priority, 0) DESC, q.visible_at
LIMIT 1
FOR UPDATE OF q SKIP LOCKED;

-- name: lock_limit
-- Held to the end of the take's transaction: takers of one limited queue count and write one
-- at a time, so two never both see the last slot free. Read committed gives each statement
-- after the lock a fresh snapshot, which holds the previous taker's committed slot.
-- (1685418594 is this library's namespace for queue locks, beside migrate's 1685418593.)
SELECT pg_advisory_xact_lock(1685418594, hashtext({schema_name} || ':' || %(queue)s));

-- name: limit_room
-- Under lock_limit: whether the queue still has a slot and a hand-out to give. No row (the
-- limit was removed meanwhile) is room.
SELECT
    (l.concurrent IS NULL OR l.concurrent > (
        SELECT count(*) FROM {schema}.queue_slot AS s
        WHERE s.queue = l.queue AND s.live_until > clock_timestamp()
    ))
    AND (l.rate IS NULL OR l.rate > (
        SELECT count(*) FROM {schema}.queue_handout AS h
        WHERE h.queue = l.queue AND h.at > clock_timestamp() - interval '1 second'
    ))
FROM {schema}.queue_limit AS l
WHERE l.queue = %(queue)s;

-- name: take_row
UPDATE {schema}.workflow_queue
SET visible_at = clock_timestamp() + %(lease)s,
    receipt = nextval({queue_receipt}::regclass)
WHERE workflow = %(workflow)s
RETURNING receipt;

-- name: take_slot
-- The slot, live for the lease as the delivery is hidden, until hold pushes it on.
INSERT INTO {schema}.queue_slot (workflow, queue, receipt, live_until)
VALUES (%(workflow)s, %(queue)s, %(receipt)s, clock_timestamp() + %(lease)s)
ON CONFLICT (workflow) DO UPDATE SET
    queue = EXCLUDED.queue, receipt = EXCLUDED.receipt, live_until = EXCLUDED.live_until;

-- name: count_handout
INSERT INTO {schema}.queue_handout (queue, at) VALUES (%(queue)s, clock_timestamp());

-- name: prune_handouts
DELETE FROM {schema}.queue_handout
WHERE queue = %(queue)s AND at <= clock_timestamp() - interval '1 second';

-- name: hold
-- Only a live slot of this very delivery: a lapsed one may be another's by now.
UPDATE {schema}.queue_slot SET live_until = clock_timestamp() + %(liveness)s
WHERE workflow = %(workflow)s AND receipt = %(receipt)s AND live_until > clock_timestamp()
RETURNING workflow;

-- name: held
SELECT count(*) FROM {schema}.queue_slot
WHERE queue = %(queue)s AND live_until > clock_timestamp();

-- name: set_limit
INSERT INTO {schema}.queue_limit (queue, concurrent, rate)
VALUES (%(queue)s, %(concurrent)s, %(rate)s)
ON CONFLICT (queue) DO UPDATE SET concurrent = EXCLUDED.concurrent, rate = EXCLUDED.rate;

-- name: clear_limit
DELETE FROM {schema}.queue_limit WHERE queue = %(queue)s;

-- name: limits
SELECT queue, concurrent, rate FROM {schema}.queue_limit ORDER BY queue;

-- name: prioritize
INSERT INTO {schema}.workflow_priority (workflow, priority) VALUES (%(workflow)s, %(priority)s)
ON CONFLICT (workflow) DO UPDATE SET priority = EXCLUDED.priority;

-- name: unprioritize
DELETE FROM {schema}.workflow_priority WHERE workflow = %(workflow)s;

-- name: wake_at
-- Answers for the delivery and schedules it in one statement. A make_ready since the delivery
-- was taken cleared the receipt, and a cancel deleted the row: either way nothing matches.
-- The same statement gives back the delivery's slot (queue limits), whatever the row says:
-- the slot is the delivery's, and its pass is over.
WITH slot AS (
    DELETE FROM {schema}.queue_slot WHERE workflow = %(workflow)s AND receipt = %(receipt)s
)
UPDATE {schema}.workflow_queue
SET visible_at = %(when)s, receipt = NULL
WHERE workflow = %(workflow)s AND receipt = %(receipt)s;

-- name: done
WITH slot AS (
    DELETE FROM {schema}.queue_slot WHERE workflow = %(workflow)s AND receipt = %(receipt)s
)
DELETE FROM {schema}.workflow_queue
WHERE workflow = %(workflow)s AND receipt = %(receipt)s;

-- name: cancel
WITH slot AS (DELETE FROM {schema}.queue_slot WHERE workflow = %(workflow)s)
DELETE FROM {schema}.workflow_queue WHERE workflow = %(workflow)s;

-- name: scheduled
SELECT visible_at FROM {schema}.workflow_queue WHERE workflow = %(workflow)s;

-- name: migrate_lock
-- Held until migrate's transaction ends, so that of many workers starting at once one creates
-- the schema and the rest find it made. Keyed by the schema name, so deployments in other
-- schemas of the same database do not wait for each other; the first number is this
-- library's own namespace of advisory locks ("dura").
SELECT pg_advisory_xact_lock(1685418593, hashtext({schema_name}));

-- name: migrate_present
-- Whether the version table exists yet: to_regclass answers NULL rather than failing.
SELECT to_regclass({version_table}) IS NOT NULL;

-- name: migrate_applied
SELECT max(version) FROM {schema}.workflow_schema_version;

-- name: migrate_mark
INSERT INTO {schema}.workflow_schema_version (version) VALUES (%(version)s)
ON CONFLICT (version) DO NOTHING;
