-- parts.lua: raise a rule's partition high-water mark (the most partitions its keys may be
-- in, so that claims and the reconciler look in every one).
--
-- KEYS[1] parts  STRING  sl:{t}:parts, the high-water mark
--
-- ARGV[1] n      a partition count in use
--
-- Returns the mark after the call (≥ n).
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local p = tonumber(ARGV[1])
if p > v then redis.call('SET', KEYS[1], p) v = p end
return v
