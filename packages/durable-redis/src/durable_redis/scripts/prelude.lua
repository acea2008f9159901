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
--
-- A record written with an operation (record_as: 'step', 'sleep', ...; transact's own
-- 'transact') carries it after the microseconds, as  <position>:<microseconds>,<operation>:
-- <encoding>. An operation is a lowercase name (no comma, no colon), so the two colons
-- still bound the encoding, and a record written before operations were kept, with no
-- comma, reads as having none: it is refused to no operation.

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

-- Lengthen a key's expiry to ``ms`` from now, never shorten it; a key without one gets it.
-- (PEXPIRE GT alone treats "no expiry" as infinite and would never set one.)
local function keep_for(key, ms)
  if redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ms)
  else
    redis.call('PEXPIRE', key, ms, 'GT')
  end
end

-- The optional TTL, refreshed on every write. The claim hash only ever has its expiry
-- lengthened here (GT), since the claim script sized it to outlive the pass's budget; so is
-- the life hash (when the script declared it), which begin sized the same way.
local function refresh(ttl, records, claim, life)
  if ttl ~= '0' then
    redis.call('PEXPIRE', records, ttl)
    redis.call('PEXPIRE', claim, ttl, 'GT')
    if life then
      keep_for(life, ttl)
    end
  end
end

-- What a record looks like on its winning write: the next position, the moment, the
-- encoding. Positions are the hash's length, so they are distinct and increasing. ``at``
-- (microseconds as text) is a moment given by the caller in place of the server's clock:
-- only supply_at and append_at (durable.interfaces.Dated, for an import) pass one. With an
-- operation (durable.interfaces.Operational), the moment carries it after a comma.
local function pack(records, encoding, operation, at)
  if not at or at == '' then
    at = now_us()
  end
  if operation and operation ~= '' then
    at = at .. ',' .. operation
  end
  return redis.call('HLEN', records) .. ':' .. at .. ':' .. encoding
end

-- The operation inside a packed record, or nil for one written without.
local function operation_of(packed)
  local first = string.find(packed, ':', 1, true)
  local second = string.find(packed, ':', first + 1, true)
  local comma = string.find(packed, ',', first + 1, true)
  if comma and comma < second then
    return string.sub(packed, comma + 1, second - 1)
  end
  return nil
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
-- With an operation, a key already recorded by another operation answers {-3, that
-- operation}, and nothing is written. ``at``: as for ``pack``.
local function write_once(records, claim, key, encoding, ttl, life, operation, at)
  if redis.call('HSETNX', records, key, pack(records, encoding, operation, at)) == 1 then
    refresh(ttl, records, claim, life)
    return 1
  end
  local packed = redis.call('HGET', records, key)
  if operation and operation ~= '' then
    local kept = operation_of(packed)
    if kept and kept ~= operation then
      return {-3, kept}
    end
  end
  local stored = encoding_of(packed)
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

-- Take the claim for one pass (claim.lua, and begin.lua with the life update): the token,
-- or false while a live pass holds it. See claim.lua for why the token tracks the clock.
local function take_claim(claim, records, liveness, budget, ttl)
  local now = now_ms()
  local held = redis.call('HMGET', claim, 'token', 'live', 'budget')
  local live, until_budget = tonumber(held[2]), tonumber(held[3])
  if live and until_budget and now < live and now < until_budget then
    return false
  end
  local previous = tonumber(held[1]) or 0
  local token = raise_token(claim, previous)
  local budget_until = now + tonumber(budget)
  redis.call('HSET', claim,
    'live', int(math.min(now + tonumber(liveness), budget_until)),
    'budget', int(budget_until),
    'window', liveness)
  -- A held claim must not expire under its holder, so its hash outlives the budget.
  if tonumber(ttl) > 0 then
    redis.call('PEXPIRE', claim, int(math.max(tonumber(ttl), tonumber(budget))))
    redis.call('PEXPIRE', records, ttl)
  end
  return token
end

-- Push a holder's liveness forward, never past its budget (renew.lua, beat.lua): 1, or
-- {-1, current token} when superseded or released, {-2, budget} when the budget is spent.
local function renew_claim(claim, token)
  local held = redis.call('HMGET', claim, 'token', 'live', 'budget', 'window')
  if held[1] ~= token or not held[2] then
    return {-1, held[1] or ''}
  end
  local now = now_ms()
  local budget = tonumber(held[3])
  if now >= budget then
    return {-2, held[3]}
  end
  redis.call('HSET', claim, 'live', int(math.min(now + tonumber(held[4]), budget)))
  return 1
end

-- Free the workflow if ``token`` still holds it, by raising the fence (release.lua,
-- settle.lua): 1 when released, 0 when the token no longer held it.
local function release_claim(claim, token)
  if redis.call('HGET', claim, 'token') ~= token then
    return 0
  end
  raise_token(claim, tonumber(token))
  redis.call('HDEL', claim, 'live', 'budget', 'window')
  return 1
end

-- Raise the fence of a workflow nobody may hold any more (discard.lua, withdraw.lua): the
-- claim hash is kept, never deleted, so the next claim still outranks a pass in flight,
-- and with a TTL it expires too, but never sooner than a live claim's would.
local function raise_fence(claim, ttl)
  local previous = tonumber(redis.call('HGET', claim, 'token')) or 0
  raise_token(claim, previous)
  redis.call('HDEL', claim, 'live', 'budget', 'window')
  if ttl ~= '0' then
    keep_for(claim, ttl)
  end
end

-- The life hash (KEYS[3] of every lifecycle script): one workflow's kind, input, status,
-- attempts and outcome, times in server ms, plus ``tx``, the id of the transition that
-- wrote its status last. Its index member is ``tx|workflow`` (see index_add.lua): a
-- script that moves the status answers the tx, status and kind it superseded, so the
-- client removes exactly that member and no other.

-- The fields that describe a pass in flight, cleared by every move out of running.
local PASS_FIELDS = {'owner', 'since', 'step', 'beat_at', 'until_at', 'waits'}
-- The fields of an outcome, cleared by a move that starts afresh.
local OUTCOME_FIELDS = {'value', 'failure_type', 'failure_message', 'failure_traceback',
  'failure_attempts'}
local TERMINAL = {finished = true, failed = true, cancelled = true}

local function clear(life, fields)
  redis.call('HDEL', life, unpack(fields))
end

-- status, kind, tx of the life hash (each false when absent; kind '' reads as none).
local function life_state(life)
  local got = redis.call('HMGET', life, 'status', 'kind', 'tx')
  local kind = got[2]
  if kind == '' then
    kind = false
  end
  return got[1] or false, kind or false, got[3] or false
end

-- What a moving script answers: the member it superseded, for the client to remove.
local function superseded(status, kind, tx)
  return {1, tx, status, kind}
end
