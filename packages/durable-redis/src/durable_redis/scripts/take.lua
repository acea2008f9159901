-- take.lua: hand out one delivery, without blocking.
--
-- KEYS[1]  the stream
-- KEYS[2]  the hash of current entries
-- ARGV[1]  the consumer group
-- ARGV[2]  this taker's consumer name
-- ARGV[3]  idle, ms: an entry whose taker has been silent this long is handed out again
-- ARGV[4]  '1' to read a never-delivered entry when nothing is reclaimed, '0' not to
--
-- Answers {entry id, workflow, deliveries} or nil.
--
-- Reclaiming goes first, with XAUTOCLAIM over the pending list, so a dead taker's
-- workflow is not starved by new work. An entry that is no longer its workflow's
-- current one (a make_ready since added a newer one, which will be delivered) is
-- acknowledged and dropped rather than handed out again; entries that were deleted
-- (cancelled) are dropped by XAUTOCLAIM itself. Each XAUTOCLAIM call scans at most ten
-- pending entries, so this walks the list by its cursor, bounded in steps.

local cursor = '0-0'
for _ = 1, 1000 do
  local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', 1)
  cursor = claimed[1]
  local entry = claimed[2][1]
  if entry then
    local id, workflow = entry[1], entry[2][2]
    if redis.call('HGET', KEYS[2], workflow) == id then
      return {id, workflow, deliveries(KEYS[1], ARGV[1], id)}
    end
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
  end
  if cursor == '0-0' then
    break
  end
end

if ARGV[4] ~= '1' then
  return false
end
local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
if not read then
  return false
end
local entry = read[1][2][1]
return {entry[1], entry[2][2], 1}
