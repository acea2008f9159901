-- release.lua: free the workflow now, if the holder still holds it.
--
-- KEYS[1]  the claim hash
-- ARGV[1]  the holder's token
--
-- Releasing raises the fence (a new token nobody holds) rather than clearing it, so the
-- released pass cannot write again and the next claim still outranks it. A stale
-- holder's release matches no token and frees nothing.

if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
raise_token(KEYS[1], tonumber(ARGV[1]))
redis.call('HDEL', KEYS[1], 'live', 'budget', 'window')
return 1
