-- take.lua: hand out one delivery from the lanes of the queues asked for, within their
-- limits, without blocking.
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the consumer group
-- ARGV[2]  this taker's consumer name
-- ARGV[3]  idle, ms: an entry whose taker has been silent this long is handed out again
-- ARGV[4]  '1' to read a never-delivered entry when nothing is reclaimed, '0' not to
-- ARGV[5]  the lease, ms: how long a slot taken here lives unless held
-- ARGV[6]  a turn: where to start in the list of queues, so that no queue starves another
-- ARGV[7]  '*' for every queue, else how many queue names follow from ARGV[8]
--
-- Answers {1, ref, workflow, deliveries, slot (1 or 0)}, or {0, fast, stream, last id,
-- stream, last id, ...} for the streams it looked at when there was nothing to hand out:
-- the caller waits for an entry after those ids (XREAD), then takes again; fast is 1 when
-- that one stream is the default queue's, unlimited and without priorities, which the
-- caller may read through the group directly.
--
-- Reclaiming goes first, with XAUTOCLAIM over each pending list, so a dead taker's
-- workflow is not starved by new work; then new entries, by priority within a queue. An
-- entry that is no longer its workflow's current one (a make_ready since added a newer one,
-- which will be delivered) is acknowledged and dropped rather than handed out again;
-- entries that were deleted (cancelled) are dropped by XAUTOCLAIM itself. Each XAUTOCLAIM
-- call scans at most ten pending entries, so this walks the list by its cursor, bounded in
-- steps. Only the lanes of the queues asked for are read: a workflow of another queue is
-- never taken and put back, so it stays ready, first in line, for a taker of its queue.
--
-- A queue with a limit is read only while it is under it: fewer live slots than
-- 'concurrent' (a slot lives until the lease, or the liveness a hold gave it, runs out:
-- dead takers' slots lapse with no sweeper), fewer hand-outs in the last second than
-- 'rate'. Counting and taking are this one script, so racing takers on any number of
-- handles never pass the limit together.

local group, consumer, idle, lease = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[5])
local served = nil
if ARGV[7] ~= '*' then
  served = {}
  for i = 1, tonumber(ARGV[7]) do
    served[ARGV[7 + i]] = true
  end
end

-- The lanes to read, grouped by queue (queues rotated by the turn), by priority within one.
local lanes_of = {}
local queues = {}
for _, lane in ipairs(redis.call('SMEMBERS', QUEUES)) do
  local queue = queue_of(lane)
  if served == nil or served[queue] then
    if not lanes_of[queue] then
      lanes_of[queue] = {}
      table.insert(queues, queue)
    end
    table.insert(lanes_of[queue], lane)
  end
end
if served == nil and not lanes_of['default'] then
  lanes_of['default'] = {'default'}
  table.insert(queues, 'default')
end
if served ~= nil then
  for i = 1, tonumber(ARGV[7]) do
    local queue = ARGV[7 + i]
    if not lanes_of[queue] then
      lanes_of[queue] = {queue}
      table.insert(queues, queue)
    end
  end
end
table.sort(queues)
local turned = {}
local n = #queues
for i = 1, n do
  turned[i] = queues[((tonumber(ARGV[6]) + i - 1) % n) + 1]
end
for _, queue in ipairs(turned) do
  table.sort(lanes_of[queue], function(a, b)
    local pa, pb = priority_of(a), priority_of(b)
    if pa ~= pb then
      return pa > pb
    end
    return a < b
  end)
end

-- Which queues are under their limits now, and each one's limit.
local now = now_ms()
local limits = {}
local open = {}
for _, queue in ipairs(turned) do
  local limit = redis.call('HGET', LIMITS, queue)
  local concurrent, rate = nil, nil
  if limit then
    local c, r = string.match(limit, '^(%d*)|(%d*)$')
    concurrent, rate = tonumber(c), tonumber(r)
  end
  limits[queue] = {concurrent, rate}
  local under = true
  if concurrent then
    redis.call('ZREMRANGEBYSCORE', slots_of(queue), '-inf', now)
    under = redis.call('ZCARD', slots_of(queue)) < concurrent
  end
  if under and rate then
    redis.call('ZREMRANGEBYSCORE', handouts_of(queue), '-inf', now - 1000)
    under = redis.call('ZCARD', handouts_of(queue)) < rate
  end
  open[queue] = under
end

-- Hand out `workflow` by the entry `ref`, for the `n`th time: count it against its queue.
local function hand_out(queue, ref, workflow, n)
  local concurrent, rate = limits[queue][1], limits[queue][2]
  local slot = 0
  if concurrent then
    redis.call('ZADD', slots_of(queue), now + lease, workflow)
    redis.call('HSET', SLOTTED, workflow, ref .. '/' .. n)
    slot = 1
  end
  if rate then
    redis.call('ZADD', handouts_of(queue), now, ref .. '/' .. n)
  end
  return {1, ref, workflow, n, slot}
end

local function reclaimed(queue, lane, stream)
  local cursor = '0-0'
  for _ = 1, 1000 do
    local claimed = redis.call('XAUTOCLAIM', stream, group, consumer, idle, cursor, 'COUNT', 1)
    cursor = claimed[1]
    local entry = claimed[2][1]
    if entry then
      local id, workflow = entry[1], entry[2][2]
      local ref = ref_of(lane, id)
      if redis.call('HGET', CURRENT, workflow) == ref then
        return hand_out(queue, ref, workflow, deliveries(stream, group, id))
      end
      redis.call('XACK', stream, group, id)
      redis.call('XDEL', stream, id)
    end
    if cursor == '0-0' then
      return nil
    end
  end
  return nil
end

local present = {}
for _, queue in ipairs(turned) do
  for _, lane in ipairs(lanes_of[queue]) do
    local stream = stream_of(lane)
    if redis.call('EXISTS', stream) == 1 then
      present[lane] = stream
      if open[queue] then
        local taken = reclaimed(queue, lane, stream)
        if taken then
          return taken
        end
      end
    end
  end
end

if ARGV[4] == '1' then
  for _, queue in ipairs(turned) do
    if open[queue] then
      for _, lane in ipairs(lanes_of[queue]) do
        local stream = present[lane]
        if stream then
          local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1,
            'STREAMS', stream, '>')
          if read then
            local entry = read[1][2][1]
            return hand_out(queue, ref_of(lane, entry[1]), entry[2][2], 1)
          end
        end
      end
    end
  end
end

local fast = 0
if #turned == 1 and turned[1] == 'default' and #lanes_of['default'] == 1
  and lanes_of['default'][1] == 'default' and not limits['default'][1]
  and not limits['default'][2] then
  fast = 1
end
local waiting = {0, fast}
for _, queue in ipairs(turned) do
  for _, lane in ipairs(lanes_of[queue]) do
    local last = '0-0'
    if present[lane] then
      local newest = redis.call('XREVRANGE', present[lane], '+', '-', 'COUNT', 1)[1]
      if newest then
        last = newest[1]
      end
    end
    table.insert(waiting, stream_of(lane))
    table.insert(waiting, last)
  end
end
return waiting
