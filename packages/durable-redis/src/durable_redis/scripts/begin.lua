-- begin.lua: claim the workflow for one pass and mark it running, in one write.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  liveness, ms
-- ARGV[2]  budget, ms
-- ARGV[3]  ttl, ms ('0' for none)
-- ARGV[4]  the owner (the worker's identity)
-- ARGV[5]  this transition's tx (its member, s:running, is already in)
--
-- Answers {token or false, status before, kind, input, attempts, lost, old tx}:
-- * a finished, failed or cancelled workflow: token false, nothing written;
-- * a live pass holds it: token false (contended), nothing written;
-- * otherwise the token take_claim minted, and the life now says running with attempts
--   one more than before (the attempt is counted here, in the claim's own write, so a
--   pass whose process dies still counts), the owner, since now; ``lost`` is the owner of
--   a previous pass that began and never settled. A row is created (no kind) if absent.
-- A resend of this very call after it ran (the life already holds this tx) answers the
-- claim it took, with old tx false so that the client removes nothing.
--
-- Running has no kind index: that is what lets the client write this move's index
-- member before it knows the kind, which only this script reads.

local got = redis.call('HMGET', KEYS[3], 'status', 'kind', 'input', 'attempts', 'owner', 'tx')
local status, kind, input, attempts, owner, tx = got[1], got[2], got[3], got[4], got[5], got[6]
if kind == '' then
  kind = nil
end
if tx == ARGV[5] then
  local token = redis.call('HGET', KEYS[2], 'token')
  return {token, 'running', kind or false, input or false, tonumber(attempts), false, false}
end
if status and TERMINAL[status] then
  return {false, status, kind or false, input or false, tonumber(attempts) or 0, false, false}
end
local token = take_claim(KEYS[2], KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not token then
  return {false, status or false, kind or false, input or false, tonumber(attempts) or 0, false,
    false}
end
local lost = false
if status == 'running' and owner then
  lost = owner
end
local counted = (tonumber(attempts) or 0) + 1
local now = int(now_ms())
clear(KEYS[3], PASS_FIELDS)
redis.call('HSET', KEYS[3],
  'status', 'running', 'attempts', int(counted), 'owner', ARGV[4], 'since', now,
  'updated_at', now, 'tx', ARGV[5])
-- Like the claim, the life outlives the pass's budget, so a pass never finds it gone.
if ARGV[3] ~= '0' then
  keep_for(KEYS[3], int(math.max(tonumber(ARGV[3]), tonumber(ARGV[2]))))
end
return {token, status or false, kind or false, input or false, counted, lost, tx or false}
