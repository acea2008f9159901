-- held.lua: how many slots of a queue are live now, by the server's clock.
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the queue

return redis.call('ZCOUNT', slots_of(ARGV[1]), '(' .. now_ms(), '+inf')
