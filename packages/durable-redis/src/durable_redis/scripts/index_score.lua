-- index_score.lua: move one member of the status index to a given score (backdate).
--
-- KEYS     the zsets the member was added to
-- ARGV[1]  the member, <tx>|<workflow>
-- ARGV[2]  the score: the life's updated_at in microseconds
--
-- XX: only a member already there is moved, so a member a newer transition has dropped is
-- never put back. Answers how many zsets held it.

local moved = 0
for _, key in ipairs(KEYS) do
  moved = moved + redis.call('ZADD', key, 'XX', 'CH', ARGV[2], ARGV[1])
end
return moved
