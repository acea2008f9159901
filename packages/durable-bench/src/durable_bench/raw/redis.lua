-- redis.lua: the raw round trip a recorded step is measured against.
--
-- KEYS[1]  a hash of the bench's own, under the testbed's key prefix
-- ARGV[1]  a field
-- ARGV[2]  a value
--
-- One write that is first-writer-wins, as cheap as a script gets: the floor for one
-- EVALSHA through redis-py. What record.lua adds over it is the fence check, the
-- position and the server's TIME, all inside the same script.

return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
