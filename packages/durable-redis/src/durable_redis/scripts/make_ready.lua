-- make_ready.lua: make a workflow runnable now.
--
-- KEYS[1]  the stream
-- KEYS[2]  the zset of deadlines
-- KEYS[3]  the hash of current entries
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
--
-- Answers 1 when it added an entry, 0 when the workflow already had one nobody has
-- taken yet (that entry will be delivered and its pass sees everything written so far).
-- A workflow whose current entry is out with a taker gets a new entry, and the new one
-- becomes current: that is how a wakeup landing while a pass runs survives the pass's
-- own answer, which no longer matches the current entry. A sleeping workflow leaves
-- the zset, since runnable now supersedes its deadline.

local current = redis.call('HGET', KEYS[3], ARGV[2])
if current and still_there(KEYS[1], current) and not deliveries(KEYS[1], ARGV[1], current) then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
enqueue(KEYS[1], KEYS[3], ARGV[2])
return 1
