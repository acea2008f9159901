-- probe_bump_then_fail.lua: the same counter, moved and then failed.
--
-- KEYS[1]  the counter hash
-- ARGV[1]  the counter's name
--
-- A store that really commits the effect and its record together leaves the counter
-- where it was: Redis keeps a failed script's earlier writes, so this proves the store
-- puts the effect's declared keys back.

redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
error('the probe fails after moving ' .. ARGV[1] .. ', by design')
