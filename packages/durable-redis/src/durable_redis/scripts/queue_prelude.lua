-- queue_prelude.lua: the helpers every queue script shares (prepended like prelude.lua).
--
-- The queue's keys share one slot of their own (tag {<prefix>}). Every queue script
-- declares the same five:
--   KEYS[1]  the default queue's stream, whose name starts every other queue's stream;
--   KEYS[2]  the zset   workflow -> the deadline (epoch ms) it sleeps until, moved onto
--                        its queue's stream by wake_due;
--   KEYS[3]  the hash   workflow -> its current entry (see ref_of): the one delivery
--                        that may still act for it;
--   KEYS[4]  the hash   workflow -> its queue (its route), as Lifecycle.admit recorded it;
--   KEYS[5]  the set    of queues that have a stream.
--   KEYS[6]  the hash   queue -> its limit, '<concurrent>|<rate>' (either may be empty);
--   KEYS[7]  the hash   workflow -> its priority (absent: 0);
--   KEYS[8]  the hash   workflow -> the receipt of the delivery holding its slot.
-- One stream per lane: a queue and a priority ('<queue>' for priority 0, '<queue>!<p>'
-- otherwise), each with one entry {w = workflow} per time a workflow of the lane was made
-- runnable, read through one consumer group, so a taken entry sits in the group's pending
-- list until it is answered for, and a taker that dies leaves it there for XAUTOCLAIM. A
-- lane's stream is named from the default one's (stream_of) and created with its group by
-- the first enqueue, as are a limited queue's zsets (slots_of, handouts_of): a caller cannot
-- declare the keys of queues it has not heard of yet. Redis checks that every key a script
-- touches is in the slot of the keys it declared, and these all carry the tag, so each
-- script stays one slot.
--
-- A workflow is in at most one of the zset and the hash of current entries. A delivery's
-- receipt is its entry's ref and how many times the group has handed that entry out, so
-- an answer from a taker whose entry was since reclaimed by another is told apart and
-- ignored.

local READY, DEADLINES, CURRENT, ROUTES, QUEUES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local LIMITS, PRIORITIES, SLOTTED = KEYS[6], KEYS[7], KEYS[8]
local BASE = string.sub(READY, 1, -7) -- READY is '<base>:ready'

-- The stream of a lane (keys.ready_stream mirrors this).
local function stream_of(lane)
  if lane == 'default' then
    return READY
  end
  return READY .. ':' .. lane
end

-- A lane's queue and priority, and the lane of a queue and priority.
local function queue_of(lane)
  return (string.match(lane, '^[^!]+'))
end

local function priority_of(lane)
  local p = string.match(lane, '!(-?%d+)$')
  return p and tonumber(p) or 0
end

local function lane_of(queue, workflow)
  local p = tonumber(redis.call('HGET', PRIORITIES, workflow) or '0')
  if p == 0 then
    return queue
  end
  return queue .. '!' .. p
end

-- The live slots of a limited queue (member workflow, score the epoch ms its slot lapses),
-- and its recent hand-outs (score the epoch ms of each).
local function slots_of(queue)
  return BASE .. ':slots:' .. queue
end

local function handouts_of(queue)
  return BASE .. ':handouts:' .. queue
end

-- The server's clock, epoch ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An entry's ref, which names its lane's stream: the bare id in the default queue (as
-- before routing, so refs written by the previous release still read), '<lane>:<id>' in
-- another (lanes hold no ':', entry ids hold no ':').
local function ref_of(lane, id)
  if lane == 'default' then
    return id
  end
  return lane .. ':' .. id
end

-- The lane and entry id of a ref.
local function parse_ref(ref)
  local lane, id = string.match(ref, '^([^:]+):(.+)$')
  if lane then
    return lane, id
  end
  return 'default', ref
end

-- Put a workflow on a lane's stream as runnable now, and make that entry its current
-- one. The first entry of a lane creates its stream and the group on it.
local function enqueue(lane, workflow, group)
  local stream = stream_of(lane)
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  end
  redis.call('SADD', QUEUES, lane)
  local id = redis.call('XADD', stream, '*', 'w', workflow)
  local ref = ref_of(lane, id)
  redis.call('HSET', CURRENT, workflow, ref)
  return ref
end

-- Whether the stream still holds the entry (cancel deletes it; answering deletes it).
local function still_there(stream, id)
  return #redis.call('XRANGE', stream, id, id) > 0
end

-- How many times the group has handed the entry out, or nil if nobody holds it (or the
-- stream is gone).
local function deliveries(stream, group, id)
  if redis.call('EXISTS', stream) == 0 then
    return nil
  end
  local pending = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if pending then
    return tonumber(pending[4])
  end
  return nil
end

-- Give back the slot of `workflow` if the delivery `receipt` holds it (any delivery's when
-- receipt is nil).
local function free_slot(workflow, receipt)
  local holder = redis.call('HGET', SLOTTED, workflow)
  if holder and (receipt == nil or holder == receipt) then
    local lane = parse_ref(string.match(holder, '^(.*)/'))
    redis.call('ZREM', slots_of(queue_of(lane)), workflow)
    redis.call('HDEL', SLOTTED, workflow)
  end
end

-- Delete a current entry still waiting (nobody took it) unless it is in `lane`; true when
-- deleted, so the caller queues the workflow again on its lane. One out with a taker is
-- left to its taker.
local function unqueue_unless(workflow, lane, group)
  local current = redis.call('HGET', CURRENT, workflow)
  if not current then
    return false
  end
  local old, id = parse_ref(current)
  if old == lane then
    return false
  end
  local stream = stream_of(old)
  if still_there(stream, id) and not deliveries(stream, group, id) then
    redis.call('XDEL', stream, id)
    redis.call('HDEL', CURRENT, workflow)
    return true
  end
  return false
end

-- Point a workflow at `queue`, moving a waiting entry of another lane (see unqueue_unless).
local function route(workflow, queue, group)
  redis.call('HSET', ROUTES, workflow, queue)
  return unqueue_unless(workflow, lane_of(queue, workflow), group)
end
