-- supply.lua: write from outside a pass, first writer wins.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash (only to refresh its TTL; the claim is neither taken nor read)
-- KEYS[3]  the life hash (only to refresh its TTL, so a workflow kept alive by arrivals
--          keeps its status too)
-- ARGV[1]  the record's key
-- ARGV[2]  the record's encoding
-- ARGV[3]  ttl, ms ('0' for none)
-- ARGV[4]  the record's moment in microseconds, in place of the server's clock (supply_at,
--          durable.interfaces.Dated); absent or '' for the clock
--
-- Answers 1 when this encoding is the stored one, {0, stored encoding} otherwise. Never
-- gated on the claim: an approval must not fail because a worker is mid-pass, and
-- nothing races it for the key except another supply, which first-writer-wins settles.

return write_once(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], KEYS[3], nil, ARGV[4])
