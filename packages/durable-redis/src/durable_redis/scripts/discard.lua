-- discard.lua: forget every record and the life, and raise the fence.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- KEYS[3]  the life hash
-- ARGV[1]  ttl, ms ('0' for none)
--
-- Answers {tx, status, kind} of the life it deleted (each false when there was none), so
-- the client removes that member from the status index.
--
-- The claim hash is kept and its token raised, never deleted: deleting it would let the
-- next claim start the count again below a pass still in flight, and that pass would
-- fill the discarded workflow back up one step at a time. Raising it refuses that pass
-- at its next write and leaves the workflow claimable at once.

local status, kind, tx = life_state(KEYS[3])
redis.call('DEL', KEYS[1], KEYS[3])
raise_fence(KEYS[2], ARGV[1])
return {tx, status, kind}
