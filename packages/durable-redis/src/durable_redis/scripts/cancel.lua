-- cancel.lua: forget a workflow's pending and scheduled runs, its route and its slot
-- (its priority stays, for a retry; see prioritize.lua).
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the workflow
--
-- Deletes the workflow's current stream entry, whether it is waiting or out with a
-- taker, and its deadline. The entry is deleted but not acknowledged: a taker that is
-- still running answers later, finds its entry gone, and so reinstates nothing; a taker
-- that died leaves an id XAUTOCLAIM drops. Older entries are already not current, and
-- take.lua never hands those out again. The route goes too (a discarded id may be started
-- again as another kind, in another queue; a retried one reads its queue again).

local current = redis.call('HGET', CURRENT, ARGV[1])
if current then
  local queue, id = parse_ref(current)
  redis.call('XDEL', stream_of(queue), id)
  redis.call('HDEL', CURRENT, ARGV[1])
end
redis.call('ZREM', DEADLINES, ARGV[1])
redis.call('HDEL', ROUTES, ARGV[1])
free_slot(ARGV[1], nil)
return 1
