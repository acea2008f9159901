#!lua flags=no-writes
-- status.lua: one workflow's life with its claim, read by the node that owns both.
--
-- KEYS[1]  the claim hash
-- KEYS[2]  the life hash
--
-- Answers {life as HGETALL, token, live, now ms}. Read in one script so the claim's
-- liveness is judged by the clock the leases are measured by; no-writes lets it run on a
-- replica too.

local claim = redis.call('HMGET', KEYS[1], 'token', 'live')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('HGETALL', KEYS[2]), claim[1] or false, claim[2] or false,
  string.format('%d', now)}
