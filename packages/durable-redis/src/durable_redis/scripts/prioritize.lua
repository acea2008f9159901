-- prioritize.lua: keep a workflow's priority (until it is discarded: cancel keeps it, so a
-- retried workflow keeps its place), and move an entry still waiting onto its new lane.
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
-- ARGV[3]  the priority (an integer; 0 is the default and is not kept)

if tonumber(ARGV[3]) == 0 then
  redis.call('HDEL', PRIORITIES, ARGV[2])
else
  redis.call('HSET', PRIORITIES, ARGV[2], ARGV[3])
end
local queue = redis.call('HGET', ROUTES, ARGV[2])
if queue and unqueue_unless(ARGV[2], lane_of(queue, ARGV[2]), ARGV[1]) then
  enqueue(lane_of(queue, ARGV[2]), ARGV[2], ARGV[1])
  return 1
end
return 0
