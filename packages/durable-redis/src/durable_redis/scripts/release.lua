-- release.lua: free the workflow now, if the holder still holds it.
--
-- KEYS[1]  the claim hash
-- ARGV[1]  the holder's token
--
-- Releasing raises the fence (a new token nobody holds) rather than clearing it, so the
-- released pass cannot write again and the next claim still outranks it. A stale
-- holder's release matches no token and frees nothing. The body is release_claim
-- (prelude.lua), shared with settle.lua.

return release_claim(KEYS[1], ARGV[1])
