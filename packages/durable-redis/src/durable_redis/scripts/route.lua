-- route.lua: record a workflow's queue without making it runnable (the schema 2 -> 3
-- migration, for workflows the previous release queued on the one stream it had).
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
-- ARGV[3]  its queue, as its life records it
--
-- A current entry still waiting in another queue's stream moves to its queue's stream
-- (a new entry, the current one); one out with a taker stays with it, and its next
-- wakeup goes to the right stream. Answers 1 when an entry moved.

if route(ARGV[2], ARGV[3], ARGV[1]) then
  enqueue(lane_of(ARGV[3], ARGV[2]), ARGV[2], ARGV[1])
  return 1
end
return 0
