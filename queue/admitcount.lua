-- admitcount.lua: count one message being admitted into a key's queue, before its publish
-- is acknowledged, and answer the key's depth and next slot for the ingress's answer
-- (X-RateLimit-Remaining, eta) without asking the stream. The key is made due by
-- markdue.lua once the publish is acknowledged.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] held   HASH  key -> "<owner> <next µs>" (claimed keys)
-- KEYS[3] depth  HASH  key -> messages queued, as counted by admissions and releases
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
--
-- ARGV[1] now       µs since the Unix epoch
-- ARGV[2] key
-- ARGV[3] capacity  of the key's queue
--
-- Returns {depth, next}: the key's depth counting this message, and the µs at which the
-- key's next message may leave (now when nothing holds it back).
--
-- The counter is an estimate: a publish that fails is counted out again by the ingress, a
-- lost count (crash) is healed when the key empties (release_fn.lua), when the stream
-- refuses a message as full (SetDepth) or by the reconciler. It is clamped to
-- [1, capacity], the range the queue is in whenever this message is stored.

local due, held, depth, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, k, cap = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local n = redis.call('HINCRBY', depth, k, 1)
if n > cap then
  n = cap
  redis.call('HSET', depth, k, n)
elseif n < 1 then
  n = 1
  redis.call('HSET', depth, k, n)
end
local nxt = redis.call('ZSCORE', due, k) or redis.call('ZSCORE', idle, k)
if not nxt then
  local h = redis.call('HGET', held, k)
  if h then nxt = string.match(h, '^%S+ (%S+)$') end
end
nxt = tonumber(nxt or now)
if nxt < now then nxt = now end
return {n, string.format('%.0f', nxt)}
