-- step.lua: the holder of a claim takes the key's next slot without releasing the key, for a
-- key with several deliveries in flight at once (delivery.max_in_flight > 1): the message
-- just taken from the key's queue is on its way, and the next may leave one interval later
-- while it is still at the sink.
--
-- KEYS[1] lease  ZSET  key -> lease expiry (µs)
-- KEYS[2] held   HASH  key -> "<owner>#<fence> <next>" (claim.lua)
-- KEYS[3] total  STRING     the rule's total_outflow meter (claim.lua)
-- KEYS[4] depth  HASH  key -> messages queued: the key's depth bucket (admit.lua)
--
-- ARGV[1] now    0: Redis's own clock (TIME); else µs since the Unix epoch (tests)
-- ARGV[2] every  µs between two messages of the key
-- ARGV[3] total  µs between two messages of the rule; 0 = no total_outflow
-- ARGV[4] lease  µs the claim stays valid after the new slot unless renewed
-- ARGV[5] owner  the drainer
-- ARGV[6] key
-- ARGV[7] fence  the claim's fencing token
-- ARGV[8] given  -1: the total_outflow meter is KEYS[3] (one partition); else a partitioned
--                rule: a slot the caller reserved from the rule's meter (meter.lua), or 0 for
--                no total_outflow; KEYS[3] is not touched
--
-- Returns {now, slot, need}: slot is when the key's next message may leave (≥ its stored next
-- time, ≥ now, ≥ the total meter or the given slot), or 0 when the key is no longer held by
-- owner under that fence, or when the given slot is earlier than the key's own next time:
-- then nothing changed and need is that time (reserve a slot at or after it and step again).
-- The step counts the message taken out of the key's depth, as a "next" release does.

local lease, held, totalkey, depth = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local every, total, leasefor, owner, key, fence = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local given = tonumber(ARGV[8] or '-1')
local h = redis.call('HGET', held, key)
if not h then return {now, 0, 0} end
local who, tok, nxt = string.match(h, '^([^#%s]+)#(%S+) (%S+)$')
if who ~= owner or tok ~= fence then return {now, 0, 0} end
local slot = tonumber(nxt)
if given > 0 then
  if slot > given then return {now, 0, slot} end
  slot = given
elseif slot < now then
  slot = now
end
if total > 0 and given < 0 then
  local tat = tonumber(redis.call('GET', totalkey) or '0')
  if slot < tat then slot = tat end
  redis.call('SET', totalkey, string.format('%.0f', slot + total))
end
redis.call('HSET', held, key, owner .. '#' .. tok .. ' ' .. string.format('%.0f', slot + every))
redis.call('ZADD', lease, slot + leasefor, key)
if redis.call('HINCRBY', depth, key, -1) <= 0 then redis.call('HDEL', depth, key) end
return {now, slot, 0}
