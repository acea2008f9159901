-- hold.lua: keep a delivery's slot for another `liveness` (the worker's heartbeat).
--
-- KEYS     as queue_prelude.lua says
-- ARGV[1]  the workflow
-- ARGV[2]  the delivery's receipt
-- ARGV[3]  liveness, ms
--
-- Answers 1 when held; 0, writing nothing, when the slot is not this delivery's any more
-- (answered, cancelled, or taken by a later hand-out) or has lapsed: a stalled taker never
-- gets a slot back that another may already have been counted into.

if redis.call('HGET', SLOTTED, ARGV[1]) ~= ARGV[2] then
  return 0
end
local lane = parse_ref(string.match(ARGV[2], '^(.*)/'))
local slots = slots_of(queue_of(lane))
local until_ms = tonumber(redis.call('ZSCORE', slots, ARGV[1]) or '0')
local now = now_ms()
if until_ms <= now then
  return 0
end
redis.call('ZADD', slots, now + tonumber(ARGV[3]), ARGV[1])
return 1
