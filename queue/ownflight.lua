-- ownflight.lua: one drainer's report of its keys in flight of a rule (own engine), sent
-- with its ownership renewal (ownflight.go), and the removal of reports whose drainer is no
-- longer live, so the hash holds at most one field per live drainer plus those that died
-- since the last report.
--
-- KEYS[1] flight  HASH  drainer -> keys of the rule it is delivering now
-- KEYS[2] members ZSET  drainer -> expiry of its announcement (µs, own.lua)
--
-- ARGV[1] now    0: Redis's own clock (TIME); else µs since the Unix epoch (tests)
-- ARGV[2] owner  the drainer
-- ARGV[3] count  its keys in flight (0: remove its field)
--
-- A drainer counts only while its announcement lasts (it renews it with its leases): the
-- count is written only when the drainer is live (own.lua ran just before in the same
-- pipeline), and every field of a drainer that is not live is removed. Returns the number of
-- fields removed.

local flight, members = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local owner, count = ARGV[2], tonumber(ARGV[3])
local live = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', members, '(' .. string.format('%.0f', now), '+inf')) do
  live[m] = true
end
local keep = live[owner] and count > 0
if keep then redis.call('HSET', flight, owner, count) end
local drop = {}
for _, f in ipairs(redis.call('HKEYS', flight)) do
  if not live[f] or (f == owner and not keep) then drop[#drop + 1] = f end
end
if #drop > 0 then redis.call('HDEL', flight, unpack(drop)) end
return #drop
