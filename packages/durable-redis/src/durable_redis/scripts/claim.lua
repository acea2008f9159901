-- claim.lua: take the workflow for one pass, or answer nil while a live pass holds it.
--
-- KEYS[1]  the claim hash   {token, live, budget, window}
-- KEYS[2]  the records hash (only to refresh its TTL)
-- ARGV[1]  liveness, ms     (the window a holder renews)
-- ARGV[2]  budget, ms       (what renewal never lifts)
-- ARGV[3]  ttl, ms          ('0' for none)
--
-- One script because checking that the workflow is free and taking it are only
-- exclusive as one step: split them and two claimers both see it free.
--
-- The token is max(now_ms, previous + 1) (raise_token): strictly increasing while the
-- hash lives, and, because it tracks the clock, still above every earlier token when the
-- hash is recreated after its TTL ran out, so a pass stalled since before the expiry is
-- outranked by the next claim and fenced. The body is take_claim (prelude.lua), shared
-- with begin.lua.

return take_claim(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
