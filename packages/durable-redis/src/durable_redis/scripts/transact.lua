-- transact.lua: perform a LuaEffect and record its result, in one script.
--
-- KEYS[1]     the records hash
-- KEYS[2]     the claim hash
-- KEYS[3..]   the effect's own keys (each carries the workflow's hash tag; checked
--             before this is sent)
-- ARGV[1]     the holder's token
-- ARGV[2]     the record's key
-- ARGV[3]     ttl, ms ('0' for none)
-- ARGV[4]     '1' when the store's codec is JSON, so a result cjson cannot parse is
--             refused before it is recorded
-- ARGV[5..]   the effect's own arguments
--
-- durable_redis composes each effect into this body as
--
--     local function effect(KEYS, ARGV) <the effect's source> end
--
-- so the effect sees only its own keys and arguments as KEYS and ARGV, and caches the
-- composed script by the effect's source.
--
-- Answers {1, encoding} when the effect ran and its result was recorded, {0, stored
-- encoding} when the key was already recorded (the effect did not run), {-1, current
-- token} when the holder was fenced (the effect did not run), {-3, recorded operation}
-- when the key holds a record of another operation than 'transact' (the effect did not
-- run), or an error reply
-- starting "EFFECT" when the effect failed.
--
-- Redis does not roll a script back when it fails part way: writes made before an
-- error stay. So before the effect runs, each of its declared keys is saved with DUMP
-- (and its PTTL), and if the effect raises or returns something that is not an
-- encoding, every declared key is put back with RESTORE (or deleted, if it did not
-- exist) before the error is answered. That, with the record written only after the
-- effect succeeds, is what makes it neither half without the other. A key the effect
-- never declared is outside that protection; on a cluster the server refuses such a
-- key (the shebang makes that hold within one node too), and on one node it is the
-- author's promise.

local refused = fenced(KEYS[2], ARGV[1])
if refused then
  return refused
end
local packed = redis.call('HGET', KEYS[1], ARGV[2])
if packed then
  local kept = operation_of(packed)
  if kept and kept ~= 'transact' then
    return {-3, kept}
  end
  return {0, encoding_of(packed)}
end

local keys, args = {}, {}
for i = 3, #KEYS do
  keys[#keys + 1] = KEYS[i]
end
for i = 5, #ARGV do
  args[#args + 1] = ARGV[i]
end

local saved = {}
for i, key in ipairs(keys) do
  saved[i] = {redis.call('DUMP', key), redis.call('PTTL', key)}
end

local function restore()
  for i, key in ipairs(keys) do
    local dump, pttl = saved[i][1], saved[i][2]
    if dump then
      redis.call('RESTORE', key, pttl > 0 and pttl or 0, dump, 'REPLACE')
    else
      redis.call('DEL', key)
    end
  end
end

local ok, result = pcall(effect, keys, args)
if ok and type(result) == 'table' and result.err then
  ok, result = false, result.err
elseif ok and type(result) ~= 'string' then
  ok, result = false, 'it returned ' .. type(result) .. ', not its result encoded as a string '
    .. '(return cjson.encode(...) under the default JSON codec)'
elseif ok and ARGV[4] == '1' and not pcall(cjson.decode, result) then
  ok, result = false, 'it returned ' .. string.sub(result, 1, 200) .. ', which is not JSON'
end
if not ok then
  if type(result) == 'table' then
    result = result.err or cjson.encode(result)
  end
  restore()
  return redis.error_reply('EFFECT ' .. tostring(result))
end

redis.call('HSET', KEYS[1], ARGV[2], pack(KEYS[1], result, 'transact'))
refresh(ARGV[3], KEYS[1], KEYS[2])
return {1, result}
