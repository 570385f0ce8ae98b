-- move.lua: the first half of moving claimed keys out of a partition that is no longer
-- theirs (the rule's partition count changed; see partition.go). The claim made the caller
-- their only holder; this takes them out of the partition entirely, and adopt.lua puts them
-- into their new partition.
--
-- KEYS[1] due, KEYS[2] lease, KEYS[3] held, KEYS[4] dirty, KEYS[5] try, KEYS[6] depth,
-- KEYS[7] idle  — the old partition's (claim.lua; depth: the base of its depth buckets)
--
-- ARGV[1] owner   the drainer that claimed the keys
-- ARGV[2..]       triples (key, fence, depth bucket): the claims
--
-- Returns {ok1, try1, depth1, ok2, ...}: okN is 1 when the key was held by owner under that
-- fence and is now gone from the partition, 0 (nothing changed) otherwise; tryN its retry
-- state ("" if none) and depthN its depth counter (0 if none), for adopt.lua.

local due, lease, held, dirty, try, depth, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner = ARGV[1]
local out = {}
for i = 2, #ARGV, 3 do
  local k, fence = ARGV[i], ARGV[i + 1]
  local dk = depth .. ':' .. ARGV[i + 2]
  local h = redis.call('HGET', held, k)
  local ok = 0
  local st, d = '', 0
  if h then
    local who, tok = string.match(h, '^([^#%s]+)#(%S+) ')
    if who == owner and tok == fence then
      ok = 1
      st = redis.call('HGET', try, k) or ''
      d = tonumber(redis.call('HGET', dk, k) or '0')
      redis.call('ZREM', lease, k)
      redis.call('ZREM', due, k)
      redis.call('ZREM', idle, k)
      redis.call('HDEL', held, k)
      redis.call('HDEL', dirty, k)
      redis.call('HDEL', try, k)
      redis.call('HDEL', dk, k)
    end
  end
  out[#out + 1] = ok
  out[#out + 1] = st
  out[#out + 1] = d
end
return out
