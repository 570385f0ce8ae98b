-- limits.lua — one admission decision over the limits of one key, atomically.
-- A port of algorithms.go (keep the two in step; the conformance suite checks it).
--
-- KEYS[i]   the state of limit i. All keys of one call share the hash tag {<key>},
--           so the script touches a single Redis Cluster slot.
--             algorithms 1, 2, 3, 5: struct.pack('<ddd', a, b, c), the three fields
--             of state in algorithms.go as doubles (24 bytes; cheaper to read and
--             write than text, and exact)
--             algorithm 4 (log):     a sorted set, score = hit time (ms), member unique
-- ARGV[1]   now: the caller's clock, ms since the Unix epoch (see doc.go on skew)
-- ARGV[2]   n: hits to count; 0 peeks
-- ARGV[3]   slack: ms added to every TTL
-- ARGV[4]   member prefix unique to this call (only read by the log)
-- ARGV[5+4(i-1) ..]  limit i: code, rate, interval (ms), burst
--           code = 1 token bucket, 2 leaky bucket, 3 fixed window, 4 sliding window
--           log, 5 sliding window counter, 6 fixed window in a time zone (the caller
--           computes the window of now: interval = its length, burst = its start, in
--           ms; the state's a is that start); +8 for a shadow limit; +16 for a
--           limit that counts the hits even when over (Limit.CountOver, fixed
--           window only: allowed when count + n <= rate, counted either way).
--
-- Returns a flat array of 4 integers per limit, in the order of KEYS:
--   allowed (1/0, this limit's own verdict), remaining (after this call),
--   retry_after (ms until n would pass; 0 when allowed, -1 never),
--   reset_after (ms until remaining grows by one; 0 when full).
-- The hits are counted in every limit that allowed them, and only when every
-- non-shadow limit allowed them (all-or-nothing). A denial writes nothing but the
-- log's removal of hits that left its window. A +16 limit counts the hits whatever
-- the answer; its refusal still keeps the other limits from counting them.
--
-- Numbers are doubles; every value stays below 2^53 (Limit.params checks), so the
-- arithmetic is exact. redis.call converts number arguments with %.17g (exact for
-- them); the log's members are built with '..' only from strings.
--
-- Written for speed, since the whole body runs on every call: two closures, no table
-- but the reply for a single limit (the common case decides and counts in one pass);
-- several limits keep their values in one flat table S between the two passes.

local floor, max, min = math.floor, math.max, math.min
local now, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local L = #KEYS
local out = {0, 0, 0, 0}

-- wait returns the ms until limit i (in state a, b, c) has room for k; -1 for never.
-- See wait and waitCounter in algorithms.go. For the log, b is the count.
local function wait(i, al, r, iv, bu, a, b, c, k)
  if k > bu then return -1 end
  if al == 1 then return max(0, floor((k * iv - a + r - 1) / r)) end
  if al == 2 then return max(0, floor((a + k * iv - bu * iv + r - 1) / r)) end
  if al == 3 then
    if b + k <= r then return 0 end
    return (a + 1) * iv - now
  end
  if al == 6 then
    if b + k <= r then return 0 end
    return a + iv - now
  end
  if al == 4 then
    local j = b + k - r
    if j <= 0 then return 0 end
    local e = redis.call('ZRANGE', KEYS[i], j - 1, j - 1, 'WITHSCORES')
    return tonumber(e[2]) + iv - now
  end
  local el = max(0, min(iv - 1, now - a * iv))
  local x = r - k - c
  if x >= 0 then
    local e = 0
    if b > 0 then e = iv - floor(((x + 1) * iv - 1) / b) end
    if e < iv then return max(0, e - el) end
  end
  if c == 0 then return iv - el end
  local e = iv - floor(((r - k + 1) * iv - 1) / c)
  if e < iv then return iv - el + max(0, e) end
  return iv - el + iv
end

-- describe counts the hits in limit i when ok (every enforced limit allows) and it
-- allows them itself, or when it counts over (co), then writes its four reply values.
local function describe(i, al, r, iv, bu, a, b, c, room, ok, co)
  local allowed = n <= room
  if co then allowed = b + n <= r end
  local retry = 0
  if not allowed then retry = wait(i, al, r, iv, bu, a, b, c, n) end
  local rem = room
  if n > 0 and ((ok and allowed) or co) then
    rem = max(0, room - n)
    local slack = tonumber(ARGV[3])
    if al == 4 then
      local member, args = ARGV[4], {}
      for j = 1, n do
        args[#args + 1] = now
        args[#args + 1] = member .. j
        if #args >= 2000 or j == n then
          redis.call('ZADD', KEYS[i], unpack(args))
          args = {}
        end
      end
      b = b + n
      redis.call('PEXPIRE', KEYS[i], iv + slack)
    else
      local ttl
      if al == 1 then
        a = a - n * iv
        ttl = floor((bu * iv - a + r - 1) / r)
      elseif al == 2 then
        a = a + n * iv
        ttl = floor((a + r - 1) / r)
      elseif al == 3 then
        b = b + n
        ttl = (a + 1) * iv - now
      elseif al == 6 then
        b = b + n
        ttl = a + iv - now
      else
        c = c + n
        ttl = (a + 2) * iv - now
      end
      redis.call('SET', KEYS[i], struct.pack('<ddd', a, b, c), 'PX', max(1, ttl) + slack)
    end
  end
  local reset = 0
  if rem < bu then reset = wait(i, al, r, iv, bu, a, b, c, rem + 1) end
  local o = 4 * (i - 1)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = allowed and 1 or 0, rem, retry, reset
end

-- Pass 1: bring every limit to now and decide it alone. S[9(i-1) + 1..9] keeps
-- algorithm, rate, interval, burst, a, b, c, room, code of limit i for pass 2.
local ok, S = true, nil
for i = 1, L do
  local p = 4 * i
  local code = tonumber(ARGV[p + 1])
  local al, r, iv, bu = code % 8, tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3]), tonumber(ARGV[p + 4])
  local a, b, c, room = 0, 0, 0, 0
  if al == 4 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - iv)
    b = redis.call('ZCARD', KEYS[i])
    room = max(0, r - b)
  else
    local v = redis.call('GET', KEYS[i])
    if v and #v == 24 then a, b, c = struct.unpack('<ddd', v) end
    if al == 1 then
      local full = bu * iv
      if b == 0 then a, b = full, now end
      a = min(a, full)
      if now > b then
        if now - b > floor(full / r) then a = full else a = min(full, a + (now - b) * r) end
        b = now
      end
      room = floor(a / iv)
    elseif al == 2 then
      if now > b then
        if now - b > floor(a / r) then a = 0 else a = a - (now - b) * r end
        b = now
      end
      room = max(0, floor((bu * iv - a) / iv))
    elseif al == 3 then
      local w = floor(now / iv)
      if w > a then a, b = w, 0 end
      room = max(0, r - b)
    elseif al == 6 then
      if bu > a then a, b = bu, 0 end
      bu = r
      room = max(0, r - b)
    else
      local w = floor(now / iv)
      if w == a + 1 then a, b, c = w, c, 0 elseif w > a then a, b, c = w, 0, 0 end
      room = max(0, r - c - floor(b * (iv - max(0, min(iv - 1, now - a * iv))) / iv))
    end
  end
  if L == 1 then
    describe(1, al, r, iv, bu, a, b, c, room, true, code >= 16)
    return out
  end
  if i == 1 then S = {} end
  local o = 9 * (i - 1)
  S[o + 1], S[o + 2], S[o + 3], S[o + 4], S[o + 5], S[o + 6], S[o + 7], S[o + 8], S[o + 9] = al, r, iv, bu, a, b, c, room, code
  if n > room and code % 16 < 8 then ok = false end -- an enforced (not +8 shadow) limit refuses
end

-- Pass 2 (several limits): count the hits all-or-nothing and describe every limit.
for i = 1, L do
  local o = 9 * (i - 1)
  describe(i, S[o + 1], S[o + 2], S[o + 3], S[o + 4], S[o + 5], S[o + 6], S[o + 7], S[o + 8], ok, S[o + 9] >= 16)
end
return out
