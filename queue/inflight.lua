-- inflight.lua: take one of a rule's sink slots (sink.max_in_flight), leased (AcquireInFlight).
--
-- KEYS[1] inflight  ZSET  member → ms its lease ends (Redis's clock)
--
-- ARGV[1] member    the delivery taking a slot
-- ARGV[2] capacity  slots of the rule
-- ARGV[3] lease     ms the slot is held unless released
--
-- Returns 1 when the slot is taken (or already held by member: a take whose answer was lost
-- and is sent again), else −(ms until the earliest lease ends, ≥ 1). The set's TTL is only
-- ever extended, to the longest lease in it: members with longer leases (another drainer's
-- -lease, a sink.timeout changed by a reload) are never dropped with the set before their
-- own lease ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return -math.max(1, tonumber(first[2]) - now)
  end
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
