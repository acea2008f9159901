-- answer.lua: answer for a delivery (done, or wake_at with a deadline), in one step.
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
-- ARGV[3]  the delivery's entry ref (which names its queue's stream)
-- ARGV[4]  how many times the entry had been handed out when this delivery took it
-- ARGV[5]  the deadline to sleep until, epoch ms, or '' for done
--
-- Answers 1 when the answer took effect, 0 when it was about a delivery that no longer
-- acts for the workflow. Three checks, each of which a separate round trip would race:
--   * the entry was handed out again since (its count moved on): another taker owns it
--     now, so this answer touches nothing;
--   * the stream no longer holds the entry: the workflow was cancelled since it was
--     taken, so nothing is reinstated (the pending-list slot is acknowledged, no more);
--   * the entry is not the workflow's current one: a make_ready landed since, and that
--     wakeup wins over this delivery's deadline or done.
-- A delivery still counted as the entry's newest gives back its queue's slot, if it holds
-- one, whatever else holds. Only a delivery passing all three schedules the deadline (or, for done, leaves the
-- workflow with nothing pending, and forgets its route: the next make_ready reads it
-- from the workflow's life again, so the routes hash holds only workflows with something
-- pending). Every deadline, even one already past, goes through the zset: wake_due moves
-- it by the timer's clock, the one the deadline was read from.

local ref = ARGV[3]
local lane, id = parse_ref(ref)
local stream = stream_of(lane)
if deliveries(stream, ARGV[1], id) ~= tonumber(ARGV[4]) then
  return 0
end
free_slot(ARGV[2], ref .. '/' .. ARGV[4])
local there = still_there(stream, id)
redis.call('XACK', stream, ARGV[1], id)
if not there then
  return 0
end
redis.call('XDEL', stream, id)
if redis.call('HGET', CURRENT, ARGV[2]) ~= ref then
  return 0
end
redis.call('HDEL', CURRENT, ARGV[2])
if ARGV[5] ~= '' then
  redis.call('ZADD', DEADLINES, ARGV[5], ARGV[2])
else
  redis.call('HDEL', ROUTES, ARGV[2])
end
return 1
