-- settle.lua: record how a pass ended and release its claim, fenced, in one write.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  the holder's token
-- ARGV[2]  this transition's tx (its members, s:<status> and k:<kind>:s:<status>, are in)
-- ARGV[3]  the kind the client indexed under ('' for none)
-- ARGV[4]  the status: finished, failed, sleeping or blocked
-- ARGV[5]  attempts to record
-- ARGV[6]  the value's encoding ('' with ARGV[7] = '0': none)
-- ARGV[7]  '1' when there is a value
-- ARGV[8..11]  the failure's type, message, traceback, attempts (ARGV[12] = '1' if any)
-- ARGV[12] '1' when there is a failure
-- ARGV[13] sleeping until, ms ('' for none)
-- ARGV[14] the waits reached, a JSON array ('' for none)
-- ARGV[15] ttl, ms ('0' for none)
--
-- Answers {1, old tx, old status, old kind} when written; {-1, current token} when the
-- holder was superseded or released (nothing written, as record.lua refuses); {0, kind}
-- when the workflow's kind is not the one the client indexed under (a start adopted it
-- mid-pass): nothing written, and the client indexes again under that kind; {2} when this
-- very call already ran.
--
-- The fence check, the outcome and the release are one step: a stale pass can never
-- record an outcome, and no pass can be claimed between the outcome and the release.

local status, kind, tx = life_state(KEYS[3])
if tx == ARGV[2] then
  return {2}
end
local refused = fenced(KEYS[2], ARGV[1])
if refused then
  return refused
end
if (kind or '') ~= ARGV[3] then
  return {0, kind or ''}
end
release_claim(KEYS[2], ARGV[1])
clear(KEYS[3], PASS_FIELDS)
clear(KEYS[3], OUTCOME_FIELDS)
redis.call('HSET', KEYS[3],
  'status', ARGV[4], 'attempts', ARGV[5], 'updated_at', int(now_ms()), 'tx', ARGV[2])
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[3], 'value', ARGV[6])
end
if ARGV[12] == '1' then
  redis.call('HSET', KEYS[3], 'failure_type', ARGV[8], 'failure_message', ARGV[9],
    'failure_traceback', ARGV[10], 'failure_attempts', ARGV[11])
end
if ARGV[13] ~= '' then
  redis.call('HSET', KEYS[3], 'until_at', ARGV[13])
end
if ARGV[14] ~= '' then
  redis.call('HSET', KEYS[3], 'waits', ARGV[14])
end
refresh(ARGV[15], KEYS[1], KEYS[2], KEYS[3])
return superseded(status, kind, tx)
