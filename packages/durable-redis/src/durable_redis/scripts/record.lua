-- record.lua: write a pass's record under its key unless the key already holds one.
--
-- KEYS[1]  the records hash
-- KEYS[2]  the claim hash
-- ARGV[1]  the holder's token
-- ARGV[2]  the record's key
-- ARGV[3]  the record's encoding
-- ARGV[4]  ttl, ms ('0' for none)
-- ARGV[5]  the operation that writes it ('' for none: a plain record)
--
-- Answers 1 when this write's encoding is the stored one (it won, or it tied with an
-- identical earlier write), {0, stored encoding} when another write got there first,
-- {-1, current token} when the holder was fenced, {-3, recorded operation} when the key
-- holds a record of another operation; in either case nothing was written.
--
-- One script because the fence check and the write it guards, and the HSETNX and the
-- comparison that says who won, are each only correct as one step: between two round
-- trips a newer pass could be claimed, or the winner could be a write this caller
-- never sees.

local refused = fenced(KEYS[2], ARGV[1])
if refused then
  return refused
end
return write_once(KEYS[1], KEYS[2], ARGV[2], ARGV[3], ARGV[4], nil, ARGV[5])
