-- withdraw.lua: cancel a workflow from outside any pass: cancelled, and the fence raised.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  the kind the client indexed under ('' for none)
-- ARGV[2]  this transition's tx (its members, s:cancelled and k:<kind>:s:cancelled, are in)
-- ARGV[3]  ttl, ms ('0' for none)
--
-- Answers {1, old tx, old status, old kind} when cancelled; {0, status} when the workflow
-- is already finished, failed or cancelled (nothing written); {-2} when there is neither
-- a life nor a record of it (nothing written); {-3, kind} when its kind is not the one
-- the client indexed under (nothing written; the client starts over); {2} when this very
-- call already ran.
--
-- The fence is raised as discard raises it, so a pass in flight is refused at its next
-- write (its settle included: a stale pass cannot undo a cancel); the records are kept.

local status, kind, tx = life_state(KEYS[3])
if tx == ARGV[2] then
  return {2}
end
if not status then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {-2}
  end
elseif TERMINAL[status] then
  return {0, status}
end
if (kind or '') ~= ARGV[1] then
  return {-3, kind or ''}
end
raise_fence(KEYS[2], ARGV[3])
-- the waits it reached stay, for show; the pass in flight is over
clear(KEYS[3], {'owner', 'since', 'step', 'beat_at', 'until_at'})
redis.call('HSET', KEYS[3], 'status', 'cancelled', 'updated_at', int(now_ms()), 'tx', ARGV[2])
refresh(ARGV[3], KEYS[1], KEYS[2], KEYS[3])
return superseded(status, kind, tx)
