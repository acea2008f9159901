-- adopt.lua: give a workflow written by the previous release its life (migration to 2).
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  the status the queue implies: ready, sleeping or blocked
-- ARGV[2]  sleeping until, ms ('' for none)
-- ARGV[3]  this transition's tx (its member, s:<status>, is already in)
-- ARGV[4]  ttl, ms ('0' for none)
--
-- Answers 1 when it created the life, 0 when one exists (first writer wins, so two
-- preparers migrating at once, or a start racing the migration, are both safe). The kind
-- is left unset: the previous release never recorded one, and the worker runs such a
-- workflow as its registry's default.

if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
local now = int(now_ms())
redis.call('HSET', KEYS[3],
  'status', ARGV[1], 'attempts', '0', 'queue', 'default', 'updated_at', now, 'tx', ARGV[3])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[3], 'until_at', ARGV[2])
end
refresh(ARGV[4], KEYS[1], KEYS[2], KEYS[3])
return 1
