-- readmit.lua: make a failed or cancelled workflow ready again with fresh attempts (retry).
--
-- KEYS[1]  the records hash (kept: recorded steps do not run again)
-- KEYS[2]  the claim hash   (only to refresh its TTL)
-- KEYS[3]  the life hash
-- ARGV[1]  the kind the client indexed under ('' for none)
-- ARGV[2]  this transition's tx (its members, s:ready and k:<kind>:s:ready, are in)
-- ARGV[3]  ttl, ms ('0' for none)
--
-- Answers {1, old tx, old status, old kind} when readmitted; {-1, status} when the
-- workflow is in any other status (a workflow with records and no life yet reads as
-- blocked); {-2} when it has neither; {-3, kind} when its kind
-- is not the one the client indexed under; {2} when this very call already ran. Every
-- answer but 1 wrote nothing.

local status, kind, tx = life_state(KEYS[3])
if tx == ARGV[2] then
  return {2}
end
if not status then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {-1, 'blocked'}  -- records from before lifecycle: blocked until a pass runs it
  end
  return {-2}
end
if status ~= 'failed' and status ~= 'cancelled' then
  return {-1, status}
end
if (kind or '') ~= ARGV[1] then
  return {-3, kind or ''}
end
clear(KEYS[3], PASS_FIELDS)
clear(KEYS[3], OUTCOME_FIELDS)
redis.call('HSET', KEYS[3],
  'status', 'ready', 'attempts', '0', 'updated_at', int(now_ms()), 'tx', ARGV[2])
refresh(ARGV[3], KEYS[1], KEYS[2], KEYS[3])
return superseded(status, kind, tx)
