-- index_add.lua: put a transition's member into the status index, before its truth moves.
--
-- KEYS     the zsets to add to (all in the index's own slot): the new status's, and the
--          new status's for the workflow's kind when it has one and is not running
-- ARGV[1]  the member, <tx>|<workflow>, unique to this transition
--
-- Answers the score: this node's TIME in microseconds, so a listing is ordered by one
-- clock, finely enough that one writer's successive moves never tie (a double holds
-- today's microsecond count exactly: it is below 2^53).
--
-- Why first: the index lives in another slot than the workflow (on a cluster, usually
-- another node), so a transition is two scripts and one must go first. Adding before the
-- truth script keeps the invariant "the status the truth holds has its member in the
-- index": a crash here leaves a member the truth never took, which every reader drops by
-- comparing it with the truth, never a truth that no list shows.

local t = redis.call('TIME')
local score = tonumber(t[1]) * 1000000 + tonumber(t[2])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, string.format('%d', score), ARGV[1])
end
return score
