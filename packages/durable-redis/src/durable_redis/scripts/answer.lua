-- answer.lua: answer for a delivery (done, or wake_at with a deadline), in one step.
--
-- KEYS[1]  the stream
-- KEYS[2]  the zset of deadlines
-- KEYS[3]  the hash of current entries
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
-- ARGV[3]  the delivery's entry id
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
-- Only a delivery passing all three schedules the deadline (or, for done, leaves the
-- workflow with nothing pending). Every deadline, even one already past, goes through
-- the zset: wake_due moves it by the timer's clock, the one the deadline was read from.

local stream, id = KEYS[1], ARGV[3]
if deliveries(stream, ARGV[1], id) ~= tonumber(ARGV[4]) then
  return 0
end
local there = still_there(stream, id)
redis.call('XACK', stream, ARGV[1], id)
if not there then
  return 0
end
redis.call('XDEL', stream, id)
if redis.call('HGET', KEYS[3], ARGV[2]) ~= id then
  return 0
end
redis.call('HDEL', KEYS[3], ARGV[2])
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[2])
end
return 1
