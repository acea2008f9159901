-- queue_prelude.lua: the helpers every queue script shares (prepended like prelude.lua).
--
-- The queue is three keys in one slot of their own:
--   the stream   one entry {w = workflow} per time a workflow was made runnable, read
--                through one consumer group, so a taken entry sits in the group's
--                pending list until it is answered for, and a taker that dies leaves it
--                there for XAUTOCLAIM;
--   the zset     workflow -> the deadline (epoch ms) it sleeps until, moved onto the
--                stream by wake_due;
--   the hash     workflow -> the id of its current stream entry: the one delivery
--                that may still act for it.
-- A workflow is in at most one of the zset and the hash. A delivery's receipt is its
-- entry id and how many times the group has handed that entry out, so an answer from a
-- taker whose entry was since reclaimed by another is told apart and ignored.

-- Put a workflow on the stream as runnable now, and make that entry its current one.
local function enqueue(stream, current, workflow)
  local id = redis.call('XADD', stream, '*', 'w', workflow)
  redis.call('HSET', current, workflow, id)
  return id
end

-- Whether the stream still holds the entry (cancel deletes it; answering deletes it).
local function still_there(stream, id)
  return #redis.call('XRANGE', stream, id, id) > 0
end

-- How many times the group has handed the entry out, or nil if nobody holds it.
local function deliveries(stream, group, id)
  local pending = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if pending then
    return tonumber(pending[4])
  end
  return nil
end
