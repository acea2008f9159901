-- append.lua: add an entry to the workflow's inbox under a key this script picks.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash (only to refresh its TTL)
-- KEYS[3]  the life hash (only to refresh its TTL)
-- ARGV[1]  the entry's encoding
-- ARGV[2]  the inbox key prefix (durable.INBOX_PREFIX)
-- ARGV[3]  how many digits an inbox position is padded to
-- ARGV[4]  ttl, ms ('0' for none)
-- ARGV[5]  the message-id marker's field (durable.SENT_PREFIX .. the id): the caller's id,
--          or one the store made for this call alone (see RedisCheckpointer.append); a
--          call that passes none appends without a marker
-- ARGV[6]  the entry's moment in microseconds, in place of the server's clock (append_at,
--          durable.interfaces.Dated); absent or '' for the clock
--
-- Answers the key. The key is numbered from the workflow's own record count, which is
-- also the position the entry is packed with, so the key's order and load's order are
-- one number and cannot disagree. Counting and writing are one step, so two appends
-- can never draw the same count.
--
-- Looking the marker up and writing it beside the entry are the same step, so of any
-- number of appends with one id (the client's own resends of one call included) the
-- first writes the entry and the marker and every later one finds the marker and answers
-- the key it holds, writing nothing. The marker is packed like a record (so it keeps a
-- position and a moment) around the inbox key as plain text: it is the store's
-- bookkeeping, which load leaves out, not an encoding. Living in the records hash, it is
-- discarded and expires with the records.

local marker = ARGV[5]
if marker then
  local sent = redis.call('HGET', KEYS[1], marker)
  if sent then
    return encoding_of(sent)
  end
end
local position = redis.call('HLEN', KEYS[1])
local key = ARGV[2] .. string.format('%0' .. ARGV[3] .. 'd', position)
local at = ARGV[6]
if not at or at == '' then
  at = now_us()
end
redis.call('HSET', KEYS[1], key, position .. ':' .. at .. ':' .. ARGV[1])
if marker then
  redis.call('HSET', KEYS[1], marker, pack(KEYS[1], key))
end
refresh(ARGV[4], KEYS[1], KEYS[2], KEYS[3])
return key
