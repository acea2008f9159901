-- move.lua: reserve an order's lines (or release them again), as the effect of a transact.
--
-- durable_redis runs this inside the script that also records the step, so the movement
-- and its record commit together: run the workflow ten times and the stock moves once.
--
-- Both keys carry the workflow's own hash tag (they are built from the checkpointer's
-- hash_key), because on a Redis Cluster a script may only touch one slot. That is why the
-- reservation lives with the order rather than in one shared stock hash: a shared hash sits
-- in a slot of its own, and a script spanning two slots is refused (CROSSSLOT). Totals
-- across orders are therefore a read over the orders, which is what the demo's ledger does.
--
-- KEYS[1]    the order's reservation hash: sku -> units this order holds reserved
-- KEYS[2]    the order's movement list: one JSON [sku, quantity] per line moved
-- ARGV[1]    1 to reserve, -1 to release
-- ARGV[2..]  sku, quantity, sku, quantity, ...
--
-- Returns the result to record, encoded as JSON: {lines = n, units = u}.

local sign = tonumber(ARGV[1])
local lines, units = 0, 0
for i = 2, #ARGV, 2 do
  local quantity = sign * tonumber(ARGV[i + 1])
  redis.call('HINCRBY', KEYS[1], ARGV[i], quantity)
  redis.call('RPUSH', KEYS[2], cjson.encode({ARGV[i], quantity}))
  lines = lines + 1
  units = units + quantity
end
return cjson.encode({lines = lines, units = units})
