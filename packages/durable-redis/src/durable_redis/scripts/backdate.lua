-- backdate.lua: set the times an import keeps (durable.interfaces.Dated) on a life hash.
--
-- KEYS[1]  the life hash
-- ARGV[1]  updated_at, ms
-- ARGV[2]  started_at, ms ('' to leave it)
--
-- Answers {1, tx, status, kind}, for the client to move the life's index member to the new
-- time (index_score.lua, in the index's own slot), or {0} when there is no life (nothing
-- written). Nothing else changes: not the status, the tx or the claim.

local status, kind, tx = life_state(KEYS[1])
if not status then
  return {0}
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'started_at', ARGV[2])
end
return {1, tx, status, kind}
