-- wake_due.lua: move every workflow whose deadline has come onto its queue's stream.
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  now, epoch ms (the caller's timer)
-- ARGV[2]  the most to move in this call
-- ARGV[3]  the consumer group (for a queue's first stream)
--
-- Answers the workflows moved. Removing a deadline and queueing its workflow are one
-- step, so two timers racing each move a workflow at most once, and no timer can crash
-- holding a workflow that is neither sleeping nor runnable. A sleeping workflow kept its
-- route (answer keeps it for a deadline); one without (a deadline written by the previous
-- release and not migrated) is in the default queue.

local due = redis.call('ZRANGE', DEADLINES, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
for _, workflow in ipairs(due) do
  redis.call('ZREM', DEADLINES, workflow)
  enqueue(lane_of(redis.call('HGET', ROUTES, workflow) or 'default', workflow), workflow, ARGV[3])
end
return due
