-- markdue.lua: keys got a message; make them due (the ingress calls this after a successful publish).
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] dirty  HASH  key -> "1"
--
-- ARGV[1] now    µs since the Unix epoch
-- ARGV[2..] keys
--
-- Returns the number of keys newly added to `due`.
--
-- A key already due keeps its score (ZADD NX): its pacing is not reset. A claimed key is not
-- added to `due` (that would let a second drainer pop it concurrently); instead it is flagged
-- dirty, so that a drainer which found it empty just before this message arrived puts it back
-- instead of dropping it (release.lua "empty"). Because the ingress marks only after the
-- publish was acknowledged, either the drainer's pop sees the message, or this script runs
-- after that pop — while the key is still claimed (dirty flag) or after it was dropped (ZADD).

local due, lease, dirty = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local added = 0
for i = 2, #ARGV do
  local k = ARGV[i]
  if redis.call('ZSCORE', lease, k) then
    redis.call('HSET', dirty, k, '1')
  else
    added = added + redis.call('ZADD', due, 'NX', now, k)
  end
end
return added
