-- renew.lua: a drainer extends the leases of keys it still holds (it is delivering them, or
-- they wait for their slot or a worker), so a short lease covers a slow delivery.
--
-- KEYS[1] lease  ZSET  key -> lease expiry (µs)
-- KEYS[2] held   HASH  key -> "<owner>#<fence> <next>" (claim.lua)
--
-- ARGV[1] now    0: Redis's own clock (TIME); else µs since the Unix epoch (tests)
-- ARGV[2] lease  µs: each renewed lease ends at now + lease
-- ARGV[3] owner  the drainer
-- ARGV[4..]      pairs (key, fence): the claims to renew
--
-- Returns {now, r1, r2, ...}: rN is 1 when the key is still held by owner under that fence
-- (its lease now ends at now + lease), 0 when it is not (the lease expired and the key was
-- taken back, by another drainer or by a newer claim): the caller must not deliver it.
-- A lease that expired but was not taken back yet is still held, and is renewed.

local lease, held = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local until_ = now + tonumber(ARGV[2])
local owner = ARGV[3]
local out = {now}
if #ARGV < 4 then return out end
local ks = {}
for i = 4, #ARGV, 2 do ks[#ks + 1] = ARGV[i] end
local hs = redis.call('HMGET', held, unpack(ks))
local zl = {}
for j = 1, #ks do
  local ok = 0
  if hs[j] then
    local who, tok = string.match(hs[j], '^([^#%s]+)#(%S+) ')
    if who == owner and tok == ARGV[3 + 2 * j] then
      ok = 1
      zl[#zl + 1] = until_
      zl[#zl + 1] = ks[j]
    end
  end
  out[#out + 1] = ok
end
if #zl > 0 then redis.call('ZADD', lease, 'XX', unpack(zl)) end
return out
