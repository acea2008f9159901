-- make_ready.lua: make a workflow runnable now, on its lane's stream (its queue and
-- priority).
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the consumer group
-- ARGV[2]  the workflow
-- ARGV[3]  its queue, or '' to use its route
-- ARGV[4]  '1': ARGV[3] is the queue a start just recorded, so it becomes the route;
--          '0': ARGV[3] (read from the workflow's life by the caller) is the route only
--          when it has none
-- KEYS[9]  on one node only: the workflow's life hash, read here for a workflow with no
--          route (on a cluster it is another slot, and the caller reads it instead)
--
-- Answers 1 when it added an entry, 0 when the workflow already had one nobody has
-- taken yet (that entry will be delivered and its pass sees everything written so far),
-- -1 when ARGV[3] is '' and the workflow has no route: the caller reads its queue from
-- its life (another slot on a cluster) and calls again with it.
-- A workflow whose current entry is out with a taker gets a new entry, and the new one
-- becomes current: that is how a wakeup landing while a pass runs survives the pass's
-- own answer, which no longer matches the current entry. A sleeping workflow leaves
-- the zset, since runnable now supersedes its deadline.

local group, workflow = ARGV[1], ARGV[2]
local queue = redis.call('HGET', ROUTES, workflow)
if ARGV[3] ~= '' and (ARGV[4] == '1' or not queue) then
  queue = ARGV[3]
  route(workflow, queue, group)
elseif not queue then
  if not KEYS[9] then
    return -1
  end
  queue = redis.call('HGET', KEYS[9], 'queue') or 'default'
  if queue == '' then
    queue = 'default'
  end
  route(workflow, queue, group)
end
local lane = lane_of(queue, workflow)
local current = redis.call('HGET', CURRENT, workflow)
if current then
  local old, id = parse_ref(current)
  local stream = stream_of(old)
  if old == lane and still_there(stream, id) and not deliveries(stream, group, id) then
    return 0
  end
end
redis.call('ZREM', DEADLINES, workflow)
enqueue(lane, workflow, group)
return 1
