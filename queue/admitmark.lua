-- admitmark.lua: one message was published to a key's queue; make the key due (as
-- markdue.lua does) and count it, returning the key's depth and next slot for the
-- ingress's answer (X-RateLimit-Remaining, eta) without asking the stream.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] dirty  HASH  key -> "1"
-- KEYS[4] held   HASH  key -> "<owner> <next µs>"
-- KEYS[5] depth  HASH  key -> messages queued (an estimate kept in step by admissions and releases)
-- KEYS[6] idle   ZSET  key -> next slot of a key that recently left `due` empty (see markdue.lua)
--
-- ARGV[1] now       µs since the Unix epoch
-- ARGV[2] key
-- ARGV[3] capacity  of the key's queue
--
-- Returns {depth, next}: the key's depth after this message, and the µs at which its next
-- message may leave (now when it became due just now).
--
-- The depth counter can drift after a crash (a publish whose mark was lost, a delete whose
-- release was lost). It is clamped to [1, capacity] here — the publish that just succeeded
-- proves the queue holds between 1 and capacity messages — and reset whenever the truth is
-- known: a drainer finding the key empty, the ingress meeting a full queue (SetDepth), the
-- reconciler listing the stream.

local due, lease, dirty, held, depth, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now, k, cap = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local nxt
redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
if redis.call('ZSCORE', lease, k) then
  redis.call('HSET', dirty, k, '1')
  local h = redis.call('HGET', held, k)
  if h then
    nxt = tonumber(string.match(h, '^%S+ (%S+)$'))
  end
else
  local at = now
  local slot = redis.call('ZSCORE', idle, k)
  if slot then
    at = math.max(now, tonumber(slot))
    redis.call('ZREM', idle, k)
  end
  redis.call('ZADD', due, 'NX', string.format('%.0f', at), k)
  nxt = tonumber(redis.call('ZSCORE', due, k))
end
local n = redis.call('HINCRBY', depth, k, 1)
if n > cap then
  n = cap
  redis.call('HSET', depth, k, n)
elseif n < 1 then
  n = 1
  redis.call('HSET', depth, k, n)
end
return {n, string.format('%.0f', nxt or now)}
