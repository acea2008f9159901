-- index_drop.lua: remove one transition's member from the status index.
--
-- KEYS     the zsets the member was added to
-- ARGV[1]  the member, <tx>|<workflow>
--
-- Sent after the truth script, for exactly the member that script reported superseded
-- (or for the caller's own member when the script changed nothing). A member is unique to
-- its transition and the truth never returns to an old tx, so this can only ever remove
-- a member that is not, and can never again be, the current one.

local removed = 0
for _, key in ipairs(KEYS) do
  removed = removed + redis.call('ZREM', key, ARGV[1])
end
return removed
