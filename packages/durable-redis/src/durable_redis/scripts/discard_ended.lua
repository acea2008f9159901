-- discard_ended.lua: discard.lua, only if the workflow has ended (durable prune).
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  ttl, ms ('0' for none)
-- ARGV[2]  the statuses that count as ended, comma-separated (terminal ones only)
-- ARGV[3]  before, ms: the life must have moved last before it
--
-- Answers {0} when the life's status is not one of ARGV[2] or it moved at or after ARGV[3]
-- (nothing written), else {1, tx, status, kind} of the life it deleted, as discard answers.
--
-- Reading the status and discarding are this one script, so a retry (readmit.lua, on the
-- same slot) runs wholly before it, and the workflow is ready and kept, or wholly after it,
-- and finds nothing to retry: a prune never forgets a workflow a retry made ready.

local status, kind, tx = life_state(KEYS[3])
if not status then
  return {0}
end
local wanted = false
for name in string.gmatch(ARGV[2], '[^,]+') do
  if name == status then
    wanted = true
  end
end
local updated = tonumber(redis.call('HGET', KEYS[3], 'updated_at') or '')
if not wanted or not updated or updated >= tonumber(ARGV[3]) then
  return {0}
end
redis.call('UNLINK', KEYS[1], KEYS[3])
raise_fence(KEYS[2], ARGV[1])
return {1, tx, status, kind}
