-- limits.lua — one admission decision over the limits of one key, atomically.
-- A port of algorithms.go (keep the two in step; the conformance suite checks it).
--
-- KEYS[i]   the state of limit i. All keys of one call share the hash tag {<key>},
--           so the script touches a single Redis Cluster slot.
--             algorithms 1, 2, 3, 5: a string "a:b:c" (see state in algorithms.go)
--             algorithm 4 (log):     a sorted set, score = hit time (ms), member unique
-- ARGV[1]   now: the caller's clock, ms since the Unix epoch (see doc.go on skew)
-- ARGV[2]   n: hits to count; 0 peeks
-- ARGV[3]   slack: ms added to every TTL
-- ARGV[4]   member prefix unique to this call (only read by the log)
-- ARGV[5+4(i-1) ..]  limit i: code, rate, interval (ms), burst
--           code = 1 token bucket, 2 leaky bucket, 3 fixed window, 4 sliding window
--           log, 5 sliding window counter; +8 for a shadow limit.
--
-- Returns a flat array of 4 integers per limit, in the order of KEYS:
--   allowed (1/0, this limit's own verdict), remaining (after this call),
--   retry_after (ms until n would pass; 0 when allowed, -1 never),
--   reset_after (ms until remaining grows by one; 0 when full).
-- The hits are counted in every limit that allowed them, and only when every
-- non-shadow limit allowed them (all-or-nothing). A denial writes nothing.
--
-- Numbers are doubles; every value stays below 2^53 (Limit.params checks), so the
-- arithmetic is exact. Numbers are passed to redis.call through '%d', never
-- tostring, which would round them to 14 digits.

local floor, max, min = math.floor, math.max, math.min
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local slack = tonumber(ARGV[3])
local member = ARGV[4]

local function cdiv(a, b) return floor((a + b - 1) / b) end
local function fmt(x) return string.format('%d', x) end

local code, alg, rate, ivl, burst = {}, {}, {}, {}, {}
local sa, sb, sc, room, count = {}, {}, {}, {}, {}

local function elapsed(i, a)
  return max(0, min(ivl[i] - 1, now - a * ivl[i]))
end

-- wait returns the ms until limit i (in state a, b, c / count) has room for k.
local function wait(i, a, b, c, k)
  local al, r, iv, bu = alg[i], rate[i], ivl[i], burst[i]
  if k > bu then return -1 end
  if al == 1 then
    return max(0, cdiv(k * iv - a, r))
  elseif al == 2 then
    return max(0, cdiv(a + k * iv - bu * iv, r))
  elseif al == 3 then
    if b + k <= r then return 0 end
    return (a + 1) * iv - now
  elseif al == 4 then
    local j = count[i] + k - r
    if j <= 0 then return 0 end
    local e = redis.call('ZRANGE', KEYS[i], j - 1, j - 1, 'WITHSCORES')
    return tonumber(e[2]) + iv - now
  end
  -- sliding window counter: see waitCounter in algorithms.go
  local el = elapsed(i, a)
  local x = r - k - c
  if x >= 0 then
    local e = 0
    if b > 0 then e = iv - floor(((x + 1) * iv - 1) / b) end
    if e < iv then return max(0, e - el) end
  end
  local to_next = iv - el
  if c == 0 then return to_next end
  local e = iv - floor(((r - k + 1) * iv - 1) / c)
  if e < iv then return to_next + max(0, e) end
  return to_next + iv
end

-- Pass 1: bring every limit to now and decide it alone.
local L = #KEYS
local ok = true
for i = 1, L do
  local base = 4 + 4 * (i - 1)
  code[i] = tonumber(ARGV[base + 1])
  alg[i] = code[i] % 8
  rate[i], ivl[i], burst[i] = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local al, r, iv, bu = alg[i], rate[i], ivl[i], burst[i]
  local a, b, c = 0, 0, 0
  if al == 4 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', fmt(now - iv))
    count[i] = redis.call('ZCARD', KEYS[i])
    room[i] = max(0, r - count[i])
  else
    local v = redis.call('GET', KEYS[i])
    if v then
      local x, y, z = string.match(v, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
      a, b, c = tonumber(x), tonumber(y), tonumber(z)
    end
    if al == 1 then
      local full = bu * iv
      if b == 0 then
        a, b = full, now
      end
      a = min(a, full)
      if now > b then
        local el = now - b
        if el > floor(full / r) then a = full else a = min(full, a + el * r) end
        b = now
      end
      room[i] = floor(a / iv)
    elseif al == 2 then
      if now > b then
        local el = now - b
        if el > floor(a / r) then a = 0 else a = a - el * r end
        b = now
      end
      room[i] = max(0, floor((bu * iv - a) / iv))
    elseif al == 3 then
      local w = floor(now / iv)
      if w > a then a, b = w, 0 end
      room[i] = max(0, r - b)
    else
      local w = floor(now / iv)
      if w == a + 1 then a, b, c = w, c, 0 elseif w > a then a, b, c = w, 0, 0 end
      room[i] = max(0, r - c - floor(b * (iv - elapsed(i, a)) / iv))
    end
  end
  sa[i], sb[i], sc[i] = a, b, c
  if n > room[i] and code[i] < 8 then ok = false end
end

-- Pass 2: count the hits (all-or-nothing) and describe every limit.
local out = {}
for i = 1, L do
  local al, iv = alg[i], ivl[i]
  local allowed = n <= room[i]
  local retry = 0
  if not allowed then retry = wait(i, sa[i], sb[i], sc[i], n) end
  local rem = room[i]
  if ok and allowed and n > 0 then
    rem = rem - n
    if al == 4 then
      local args = {}
      for j = 1, n do
        args[#args + 1] = fmt(now)
        args[#args + 1] = member .. j
        if #args >= 2000 or j == n then
          redis.call('ZADD', KEYS[i], unpack(args))
          args = {}
        end
      end
      count[i] = count[i] + n
      redis.call('PEXPIRE', KEYS[i], fmt(iv + slack))
    else
      if al == 1 then sa[i] = sa[i] - n * iv
      elseif al == 2 then sa[i] = sa[i] + n * iv
      elseif al == 3 then sb[i] = sb[i] + n
      else sc[i] = sc[i] + n end
      local ttl
      if al == 1 then ttl = cdiv(burst[i] * iv - sa[i], rate[i])
      elseif al == 2 then ttl = cdiv(sa[i], rate[i])
      elseif al == 3 then ttl = (sa[i] + 1) * iv - now
      else ttl = (sa[i] + 2) * iv - now end
      redis.call('SET', KEYS[i], fmt(sa[i]) .. ':' .. fmt(sb[i]) .. ':' .. fmt(sc[i]), 'PX', fmt(max(1, ttl) + slack))
    end
  end
  local reset = 0
  if rem < burst[i] then reset = wait(i, sa[i], sb[i], sc[i], rem + 1) end
  out[#out + 1] = allowed and 1 or 0
  out[#out + 1] = rem
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out
