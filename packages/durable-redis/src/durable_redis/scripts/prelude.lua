-- prelude.lua: the helpers every checkpoint script shares.
--
-- durable_redis prepends this file (after a `#!lua` line) to each checkpoint script
-- before loading it, so each script stays one self-contained body that the server runs
-- as one step. The shebang matters on a cluster: a script without one may reach keys of
-- another slot that the same node happens to own, and one with it is refused, so a key
-- that was never declared cannot slip through a single-node test and fail in production.
--
-- A record is stored in the workflow's hash as  <position>:<microseconds>:<encoding>.
-- The position is the hash's length when the record was first written; keeping it in
-- the value, in front of the encoding, is what keeps load order once the hash converts
-- from a listpack (which preserves insertion order) to a hashtable (which does not), and
-- it keeps the order inside the one key, so there is no second structure to expire in
-- step with it. The microseconds are the server's TIME at the winning write.

-- The server's clock, in whole milliseconds. Every lease is measured by it, because the
-- writers are other machines whose clocks need not agree with each other.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The server's clock as a decimal count of microseconds, built as text so no float
-- rounding touches it.
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- Integers cross into redis.call as text; %d keeps 13-digit millisecond values exact
-- where Lua's default number formatting would switch to an exponent.
local function int(n)
  return string.format('%d', n)
end

-- Mint the next token: max(now_ms, previous + 1), by HINCRBY so the server keeps it an
-- exact integer. Tracking the clock is what keeps it above every earlier token even when
-- the claim hash is recreated (after its TTL, or a failover that lost it), where a
-- counter would start again at 1.
local function raise_token(claim, previous)
  return redis.call('HINCRBY', claim, 'token', int(math.max(now_ms(), previous + 1) - previous))
end

-- The optional TTL, refreshed on every write. The claim hash only ever has its expiry
-- lengthened here (GT), since the claim script sized it to outlive the pass's budget.
local function refresh(ttl, records, claim)
  if ttl ~= '0' then
    redis.call('PEXPIRE', records, ttl)
    redis.call('PEXPIRE', claim, ttl, 'GT')
  end
end

-- What a record looks like on its winning write: the next position, the moment, the
-- encoding. Positions are the hash's length, so they are distinct and increasing.
local function pack(records, encoding)
  return redis.call('HLEN', records) .. ':' .. now_us() .. ':' .. encoding
end

-- The encoding inside a packed record (everything after the second colon).
local function encoding_of(packed)
  local first = string.find(packed, ':', 1, true)
  local second = string.find(packed, ':', first + 1, true)
  return string.sub(packed, second + 1)
end

-- First writer wins: write the record unless the key holds one, and say whose encoding
-- is stored. Answers 1 when it is this one (a win, or a tie with an identical earlier
-- write), {0, stored encoding} otherwise. A losing write writes nothing, not even a TTL.
local function write_once(records, claim, key, encoding, ttl)
  if redis.call('HSETNX', records, key, pack(records, encoding)) == 1 then
    refresh(ttl, records, claim)
    return 1
  end
  local stored = encoding_of(redis.call('HGET', records, key))
  if stored == encoding then
    return 1
  end
  return {0, stored}
end

-- The fence: the holder's token must be the highest the claim hash has issued. Tokens
-- are compared as the exact text HINCRBY wrote, never as floats.
local function fenced(claim, token)
  local current = redis.call('HGET', claim, 'token')
  if current ~= token then
    return {-1, current or ''}
  end
  return nil
end
