-- discard.lua: forget every record and raise the fence.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- ARGV[1]  ttl, ms ('0' for none)
--
-- The claim hash is kept and its token raised, never deleted: deleting it would let the
-- next claim start the count again below a pass still in flight, and that pass would
-- fill the discarded workflow back up one step at a time. Raising it refuses that pass
-- at its next write and leaves the workflow claimable at once.

redis.call('DEL', KEYS[1])
local previous = tonumber(redis.call('HGET', KEYS[2], 'token')) or 0
raise_token(KEYS[2], previous)
redis.call('HDEL', KEYS[2], 'live', 'budget', 'window')
-- With a TTL the kept fence expires too, but never sooner than a live claim's would.
if ARGV[1] ~= '0' then
  if redis.call('PTTL', KEYS[2]) == -1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[1])
  else
    redis.call('PEXPIRE', KEYS[2], ARGV[1], 'GT')
  end
end
return 1
