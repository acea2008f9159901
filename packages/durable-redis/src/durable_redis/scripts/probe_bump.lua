-- probe_bump.lua: the conformance suite's counter, as a LuaEffect source.
--
-- KEYS[1]  the counter hash (it carries the workflow's hash tag)
-- ARGV[1]  the counter's name
--
-- Adds one and returns the new value, encoded as the default JSON codec would.

return cjson.encode(redis.call('HINCRBY', KEYS[1], ARGV[1], 1))
