-- append.lua: add an entry to the workflow's inbox under a key this script picks.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash (only to refresh its TTL)
-- ARGV[1]  the entry's encoding
-- ARGV[2]  the inbox key prefix (durable.INBOX_PREFIX)
-- ARGV[3]  how many digits an inbox position is padded to
-- ARGV[4]  ttl, ms ('0' for none)
--
-- Answers the key. The key is numbered from the workflow's own record count, which is
-- also the position the entry is packed with, so the key's order and load's order are
-- one number and cannot disagree. Counting and writing are one step, so two appends
-- can never draw the same count.

local position = redis.call('HLEN', KEYS[1])
local key = ARGV[2] .. string.format('%0' .. ARGV[3] .. 'd', position)
redis.call('HSET', KEYS[1], key, position .. ':' .. now_us() .. ':' .. ARGV[1])
refresh(ARGV[4], KEYS[1], KEYS[2])
return key
