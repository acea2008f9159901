-- cancel.lua: forget a workflow's pending and scheduled runs.
--
-- KEYS[1]  the stream
-- KEYS[2]  the zset of deadlines
-- KEYS[3]  the hash of current entries
-- ARGV[1]  the workflow
--
-- Deletes the workflow's current stream entry, whether it is waiting or out with a
-- taker, and its deadline. The entry is deleted but not acknowledged: a taker that is
-- still running answers later, finds its entry gone, and so reinstates nothing; a taker
-- that died leaves an id XAUTOCLAIM drops. Older entries are already not current, and
-- take.lua never hands those out again.

local current = redis.call('HGET', KEYS[3], ARGV[1])
if current then
  redis.call('XDEL', KEYS[1], current)
  redis.call('HDEL', KEYS[3], ARGV[1])
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
