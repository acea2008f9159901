-- renew.lua: push a holder's liveness forward, never past its budget.
--
-- KEYS[1]  the claim hash
-- ARGV[1]  the holder's token
--
-- Answers 1 when renewed, {-1, current token} when a newer pass was claimed (or the
-- workflow released or discarded), {-2, budget} when the budget is spent. Checking the
-- token and moving the deadline are one step, or a renewal could extend a claim that
-- was taken over between the two. The body is renew_claim (prelude.lua), shared with
-- beat.lua.

return renew_claim(KEYS[1], ARGV[1])
