-- own.lua: one drainer's ownership of a rule's ownership partitions (ownership.go): announce
-- itself, renew what it owns, give up its surplus, take free partitions up to its share.
-- One call per rule and renewal, whatever the number of messages.
--
-- KEYS[1] members ZSET   drainer -> expiry of its announcement (µs, Redis's clock)
-- KEYS[2] leases  HASH   partition -> "<owner> <fence> <expiry µs>"
-- KEYS[3] fence   STRING the last fencing token handed out (never below Redis's time in µs)
-- KEYS[4] parts   STRING the partition count the rule's leases are taken under
--
-- ARGV[1] now    0: Redis's own clock (TIME); else µs since the Unix epoch (tests)
-- ARGV[2] lease  µs: a lease (and the announcement) ends at now + lease
-- ARGV[3] owner  the drainer (no spaces)
-- ARGV[4] parts  the rule's ownership partition count P
-- ARGV[5] leave  1: give up everything and withdraw the announcement (soft stop); 0: own
-- ARGV[6] max    the most partitions this drainer may own (0 = its fair share only; -1 =
--                none: a starting drainer announces itself first, so drainers started
--                together split the partitions at once instead of handing them over)
-- ARGV[7..]      partitions the drainer gives up now: it was told they are surplus (below)
--                and has stopped delivering them
--
-- Returns {now, members, rank, part1, fence1, part2, fence2, ...} (rank: this drainer's place,
-- 0-based, among the live members sorted by name, for splitting a rule-wide cap): every partition the owner holds
-- after the call, with its lease's fencing token (a token grows on every acquisition, so a
-- new owner's deliveries carry larger Sluice-Fence values than any earlier owner's). A
-- negative fence -F: the partition is held under F but is surplus; the drainer stops
-- delivering it and gives it up by naming it in its next call (ARGV[7..]), so a partition is
-- never given up while a delivery of it may still be in flight.
--
-- Shares: the live members (announcement not expired), sorted by name, each get floor(P/N)
-- partitions and the first P mod N one more. A drainer above its share is told which of its
-- highest partitions to give up (negative fence); one below takes free ones (never held, released, or whose lease expired).
-- A partition held by another live member is never taken: it frees it at its own next call,
-- so a join converges within two renewal periods and a dead drainer's partitions are free
-- once its leases expire.
--
-- Partition count: drainers must agree on P (a lease names a partition number, which means
-- other keys under another P, so two counts would own the same keys twice). KEYS[4] records
-- the count the leases are taken under; it changes only while no other drainer holds an
-- unexpired lease. A drainer whose P differs takes nothing, gives up what it held (it stopped
-- delivering at its own deadline), withdraws its announcement (the others' shares count
-- only agreeing drainers) and is answered {now, 0, -agreed P}.

local members, leases, fencekey, partskey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local leasefor, owner, P, leave, cap = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6])
local expiry = now + leasefor
local giving = {}
for i = 7, #ARGV do giving[tonumber(ARGV[i])] = true end

local cur = redis.call('HGETALL', leases)
local mine, taken = {}, {}
local drop = {}
local foreign = false
for i = 1, #cur, 2 do
  local who, _, exp = string.match(cur[i + 1], '^(%S+) (%S+) (%S+)$')
  if who ~= owner and tonumber(exp) and tonumber(exp) > now then foreign = true end
end
local agreed = tonumber(redis.call('GET', partskey) or '0')
if agreed ~= P and not leave then
  if agreed == 0 or not foreign then
    redis.call('SET', partskey, P)
    agreed = P
  else
    local mineAll = {}
    for i = 1, #cur, 2 do
      if string.match(cur[i + 1], '^(%S+) ') == owner then mineAll[#mineAll + 1] = cur[i] end
    end
    if #mineAll > 0 then redis.call('HDEL', leases, unpack(mineAll)) end
    redis.call('ZREM', members, owner)
    return {now, 0, -agreed}
  end
end
for i = 1, #cur, 2 do
  local p = tonumber(cur[i])
  local who, tok, exp = string.match(cur[i + 1], '^(%S+) (%S+) (%S+)$')
  exp = tonumber(exp)
  if who == owner then
    -- Ours, even past its expiry if nobody took it since: this drainer stopped delivering
    -- at its own deadline, so renewing it now is safe.
    if p == nil or p >= P or leave or giving[p] then
      drop[#drop + 1] = cur[i]
    else
      mine[#mine + 1] = {p, tok}
    end
  elseif p ~= nil and exp and exp > now then
    taken[p] = true
  end
end

if leave then
  if #drop > 0 then redis.call('HDEL', leases, unpack(drop)) end
  redis.call('ZREM', members, owner)
  return {now, 0, 0}
end

redis.call('ZADD', members, expiry, owner)
redis.call('ZREMRANGEBYSCORE', members, '-inf', now)
local ms = redis.call('ZRANGE', members, 0, -1)
table.sort(ms)
local n, rank = #ms, 1
for i, m in ipairs(ms) do if m == owner then rank = i end end
local share = math.floor(P / n)
if rank <= P % n then share = share + 1 end
if cap > 0 and share > cap then share = cap end
if cap < 0 then share = 0 end

table.sort(mine, function(a, b) return a[1] < b[1] end)
local surplus = {}
for j = share + 1, #mine do surplus[mine[j][1]] = true end
if #drop > 0 then redis.call('HDEL', leases, unpack(drop)) end

local hs = {}
for _, m in ipairs(mine) do
  hs[#hs + 1] = m[1]
  hs[#hs + 1] = owner .. ' ' .. m[2] .. ' ' .. string.format('%.0f', expiry)
end
-- Free partitions, from a start that differs per member so that joiners do not all reach
-- for the same ones (harmless, the script is atomic, but spreads the first acquisitions).
local want = share - #mine
if want > 0 then
  local own = {}
  for _, m in ipairs(mine) do own[m[1]] = true end
  local free = {}
  local start = math.floor((rank - 1) * P / n)
  for j = 0, P - 1 do
    local p = (start + j) % P
    if not taken[p] and not own[p] then free[#free + 1] = p end
    if #free >= want then break end
  end
  if #free > 0 then
    local base = redis.call('INCRBY', fencekey, #free) - #free
    if base < now then
      base = now
      redis.call('SET', fencekey, string.format('%.0f', now + #free))
    end
    for j, p in ipairs(free) do
      local tok = string.format('%.0f', base + j)
      mine[#mine + 1] = {p, tok}
      hs[#hs + 1] = p
      hs[#hs + 1] = owner .. ' ' .. tok .. ' ' .. string.format('%.0f', expiry)
    end
  end
end
if #hs > 0 then redis.call('HSET', leases, unpack(hs)) end

local out = {now, n, rank - 1}
for _, m in ipairs(mine) do
  out[#out + 1] = m[1]
  if surplus[m[1]] then
    out[#out + 1] = -tonumber(m[2])
  else
    out[#out + 1] = tonumber(m[2])
  end
end
return out
