-- renew.lua: push a holder's liveness forward, never past its budget.
--
-- KEYS[1]  the claim hash
-- ARGV[1]  the holder's token
--
-- Answers 1 when renewed, {-1, current token} when a newer pass was claimed (or the
-- workflow released or discarded), {-2, budget} when the budget is spent. Checking the
-- token and moving the deadline are one step, or a renewal could extend a claim that
-- was taken over between the two.

local claim = redis.call('HMGET', KEYS[1], 'token', 'live', 'budget', 'window')
if claim[1] ~= ARGV[1] or not claim[2] then
  return {-1, claim[1] or ''}
end
local now = now_ms()
local budget = tonumber(claim[3])
if now >= budget then
  return {-2, claim[3]}
end
redis.call('HSET', KEYS[1], 'live', int(math.min(now + tonumber(claim[4]), budget)))
return 1
