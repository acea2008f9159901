-- admit.lua: record a workflow's kind and input (start), once.
--
-- KEYS[1]  the records hash (only to refresh its TTL)
-- KEYS[2]  the claim hash   (only to refresh its TTL)
-- KEYS[3]  the life hash
-- ARGV[1]  the kind
-- ARGV[2]  the input's encoding
-- ARGV[3]  the queue
-- ARGV[4]  this transition's tx (its member, s:ready and k:<kind>:s:ready, is already in)
-- ARGV[5]  ttl, ms ('0' for none)
--
-- Answers {1, old tx, old status, old kind} when it wrote (a new workflow, or one with no
-- kind adopted: ready, attempts 0); {0, status} when the same kind and input encoding is
-- there already (nothing written); {-1, kind, input} when another kind or input is
-- (nothing written); {2} when this very call already ran (the client resent it after a
-- dropped connection), so its member is the current one and must stay.
--
-- Reading and writing are one step, so of any number of concurrent starts exactly one
-- writes and every other one compares against it.

local status, kind, tx = life_state(KEYS[3])
if tx == ARGV[4] then
  return {2}
end
if kind then
  local input = redis.call('HGET', KEYS[3], 'input')
  if kind == ARGV[1] and input == ARGV[2] then
    return {0, status}
  end
  return {-1, kind, input or false}
end
local now = int(now_ms())
clear(KEYS[3], PASS_FIELDS)
clear(KEYS[3], OUTCOME_FIELDS)
redis.call('HSET', KEYS[3],
  'kind', ARGV[1], 'input', ARGV[2], 'queue', ARGV[3], 'status', 'ready', 'attempts', '0',
  'started_at', now, 'updated_at', now, 'tx', ARGV[4])
refresh(ARGV[5], KEYS[1], KEYS[2], KEYS[3])
return superseded(status, kind, tx)
