-- adopt.lua: the second half of moving keys into their new partition (see move.lua).
--
-- KEYS[1] due, KEYS[2] lease, KEYS[3] dirty, KEYS[4] try, KEYS[5] depth — the new
-- partition's (claim.lua; depth: the base of its depth buckets)
--
-- ARGV: groups of five (key, at, try, depth, depth bucket): the key is due at `at` (µs; the
-- slot its claim in the old partition had), with that retry state ("" none) and depth.
--
-- A key already due here (a message for it arrived since the change and the ingress marked it
-- in its new partition) keeps the later of the two times (ZADD GT), so it does not leave
-- faster than its outflow; a key already claimed here is flagged dirty (admit.lua) so its
-- holder does not drop it. Retry state is kept unless the new partition has its own; depth
-- counters add up (the ingress counts new messages in the new partition).
--
-- Returns the number of keys added to `due`.

local due, lease, dirty, try, depth = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local added = 0
for i = 1, #ARGV, 5 do
  local k, at, st, d = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  if redis.call('ZSCORE', lease, k) then
    redis.call('HSET', dirty, k, '1')
  else
    added = added + redis.call('ZADD', due, 'GT', 'CH', at, k)
  end
  if st ~= '' then redis.call('HSETNX', try, k, st) end
  if d > 0 then redis.call('HINCRBY', depth .. ':' .. ARGV[i + 4], k, d) end
end
return added
