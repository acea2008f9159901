-- claim.lua: take the workflow for one pass, or answer nil while a live pass holds it.
--
-- KEYS[1]  the claim hash   {token, live, budget, window}
-- KEYS[2]  the records hash (only to refresh its TTL)
-- ARGV[1]  liveness, ms     (the window a holder renews)
-- ARGV[2]  budget, ms       (what renewal never lifts)
-- ARGV[3]  ttl, ms          ('0' for none)
--
-- One script because checking that the workflow is free and taking it are only
-- exclusive as one step: split them and two claimers both see it free.
--
-- The token is max(now_ms, previous + 1) (raise_token): strictly increasing while the
-- hash lives, and, because it tracks the clock, still above every earlier token when the
-- hash is recreated after its TTL ran out, so a pass stalled since before the expiry is
-- outranked by the next claim and fenced.

local now = now_ms()
local claim = redis.call('HMGET', KEYS[1], 'token', 'live', 'budget')
local live, budget = tonumber(claim[2]), tonumber(claim[3])
if live and budget and now < live and now < budget then
  return false
end

local previous = tonumber(claim[1]) or 0
local token = raise_token(KEYS[1], previous)
local budget_until = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1],
  'live', int(math.min(now + tonumber(ARGV[1]), budget_until)),
  'budget', int(budget_until),
  'window', ARGV[1])

-- A held claim must not expire under its holder, so its hash outlives the budget.
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], int(math.max(ttl, tonumber(ARGV[2]))))
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return token
