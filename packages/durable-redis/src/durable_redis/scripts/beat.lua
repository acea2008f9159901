-- beat.lua: renew a pass's claim and name the step it has in flight, in one write.
--
-- KEYS[1]  the claim hash
-- KEYS[2]  the life hash
-- ARGV[1]  the holder's token
-- ARGV[2]  the step in flight ('' for none)
--
-- Answers what renew.lua answers; only a renewed pass writes its step, so a stale pass
-- can never name a step. The status does not move, so the index is not touched.

local renewed = renew_claim(KEYS[1], ARGV[1])
if renewed ~= 1 then
  return renewed
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  if ARGV[2] == '' then
    redis.call('HDEL', KEYS[2], 'step')
  else
    redis.call('HSET', KEYS[2], 'step', ARGV[2])
  end
  redis.call('HSET', KEYS[2], 'beat_at', int(now_ms()))
end
return 1
