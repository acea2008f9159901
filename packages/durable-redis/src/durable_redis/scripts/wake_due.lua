-- wake_due.lua: move every workflow whose deadline has come onto the stream.
--
-- KEYS[1]  the stream
-- KEYS[2]  the zset of deadlines
-- KEYS[3]  the hash of current entries
-- ARGV[1]  now, epoch ms (the caller's timer)
-- ARGV[2]  the most to move in this call
--
-- Answers the workflows moved. Removing a deadline and queueing its workflow are one
-- step, so two timers racing each move a workflow at most once, and no timer can crash
-- holding a workflow that is neither sleeping nor runnable.

local due = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, workflow in ipairs(due) do
  redis.call('ZREM', KEYS[2], workflow)
  enqueue(KEYS[1], KEYS[3], workflow)
end
return due
