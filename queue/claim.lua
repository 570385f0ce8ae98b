-- claim.lua: claim up to ARGV[2] due keys of one rule for one drainer (leaky-bucket outflow).
--
-- KEYS[1] due    ZSET  key -> time (µs) its next message may leave; keys with messages, not claimed
-- KEYS[2] lease  ZSET  key -> lease expiry (µs); keys claimed by some drainer
-- KEYS[3] held   HASH  key -> "<owner> <next>": who holds the claim and the key's next due time
-- KEYS[4] dirty  HASH  key -> "1": MarkDue saw the key while it was claimed (see admit.lua)
-- KEYS[5] total  STRING     the rule's total_outflow meter: time (µs) the next message of any key may leave
-- KEYS[6] try    HASH  key -> "<msg id>\n<attempts>\n<last error>": the key's head message is being retried
-- KEYS[7] depth  the partition's depth key: the ingress's counters are in its buckets
--                (admit.lua); releases only
-- KEYS[8] idle   ZSET  key -> unused slot of a key that emptied (admit.lua); releases only
-- KEYS[9] fence  STRING     the rule's fencing counter: the last token handed to a claim
--
-- ARGV[1] now        0: Redis's own clock (TIME), what drainers use, so every drainer paces
--                    and leases by one clock; else a time in µs since the Unix epoch (tests)
-- ARGV[2] max        claim at most this many keys
-- ARGV[3] lookahead  µs: also claim keys whose slot is at most now+lookahead (the drainer waits for the slot)
-- ARGV[4] every      µs between two messages of one key (1/outflow); 0 = no per-key limit
-- ARGV[5] total      µs between two messages of the rule (1/total_outflow); 0 = no total_outflow
-- ARGV[6] lease      µs a claim stays valid after its slot; then another drainer may take the key
-- ARGV[7] owner      the claiming drainer's id (no spaces)
-- ARGV[8] reclaim    recover at most this many expired leases in this call
-- ARGV[9]  nslots    -1: the rule's total_outflow meter is KEYS[5] (one partition, see
--                    scheduler.go); else a partitioned rule: the total_outflow slots the
--                    caller reserved from the rule's meter (meter.lua) follow, ascending, and
--                    KEYS[5] is not touched: with total > 0 each claimed key takes the first
--                    unused slot at or after its due time, and at most nslots keys are claimed
--                    (0 with total = 0: no meter at all)
-- ARGV[10..9+nslots] the reserved slots (µs)
-- then               keys this owner releases first, in groups of six as for release.lua
--                    (key, mode, at, state, fence, bucket): a drainer hands back the keys it finished
--                    with in the same round trip as its next claim
--
-- Returns {next, lost, now, refunds, lostkey1, …, lostkeyL, key1, slot1, due1, try1, fence1, key2, ...}:
--   next   µs of the earliest slot not claimed now (earliest due key, or the total_outflow meter
--          if that is later), or -1 when no key is due at all: when to call again.
--   lost   how many of the released keys this owner no longer held (release.lua returns 0);
--          their names follow the four header values (a partitioned rule looks for them in
--          their old partition, see partition.go)
--   now    the time the script used (µs): Redis's clock, or ARGV[1]
--   refunds released keys that emptied: total_outflow slots unused (given back to KEYS[5]
--          here when nslots is -1; the caller gives them back to the meter otherwise)
--   slotN  µs the key's message may leave (≥ its due time, ≥ now, ≥ the total meter)
--   dueN   µs the key was due (its score before the claim): slot − due is scheduling delay
--   tryN   the key's retry state (KEYS[6]) or nil
--   fenceN the claim's fencing token: larger than every token handed out before in this
--          partition (so for this key), never reused, and never below the current time in µs:
--          the counter is one string per partition, raised to now when it is behind, so tokens
--          keep growing even if Redis lost the counter, and a key that moves to another
--          partition (the rule's partition count changed) still gets larger tokens as long as
--          no partition handed out more than one token per µs on average.
--          `held` stores "<owner>#<fence> <next>": a release or renewal must name both.
--
-- Outflow is GCRA: a claimed key's next due time is slot + every, so a key never leaves
-- faster than its outflow, and a late claim does not earn a burst. The total_outflow meter
-- advances by `total` per claim in the same script; keys are taken lowest-due-first, so a
-- scarce total_outflow is shared fairly. Claimed keys move from `due` to `lease`, so a key is
-- never held by two drainers and never claimed again before its holder releases it (or its
-- lease expires: an expired lease puts the key back into `due` at its stored next time).
--
-- release_keys is defined in release_fn.lua, which the Go code prepends.

local due, lease, held, dirty, totalkey, try, depth, idle, fencekey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local max = tonumber(ARGV[2])
local horizon = now + tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local total = tonumber(ARGV[5])
local leasefor = tonumber(ARGV[6])
local owner = ARGV[7]
local reclaim = tonumber(ARGV[8])
local nslots = tonumber(ARGV[9])
local ext = nslots >= 0
local xslots = {}
if ext then
  for i = 10, 9 + nslots do xslots[#xslots + 1] = tonumber(ARGV[i]) end
  if total > 0 and max > nslots then max = nslots end
else
  nslots = 0
end

-- 0. Apply this owner's releases.
local lostkeys = {}
local meterevery = total
if ext then meterevery = 0 end
local rel, refunds = release_keys(due, lease, held, dirty, totalkey, try, depth, idle, owner, meterevery, ARGV, 10 + nslots)
for j, v in ipairs(rel) do
  if v == 0 then lostkeys[#lostkeys + 1] = ARGV[10 + nslots + (j - 1) * 6] end
end

-- Forget the unused slots of emptied keys once they have passed (as admit.lua does): no
-- admission may come after a flood, and a slot in the past holds nothing back.
redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)

-- 1. Hand back keys whose holder did not release them in time (crashed or stuck drainer).
local expired = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, reclaim)
for _, k in ipairs(expired) do
  local h = redis.call('HGET', held, k)
  local nxt = now
  if h then
    nxt = tonumber(string.match(h, ' (%S+)$')) or now
  end
  redis.call('ZADD', due, nxt, k)
  redis.call('ZREM', lease, k)
  redis.call('HDEL', held, k)
end

-- 2. Claim due keys, lowest due time first.
local tat = 0
if total > 0 and not ext then
  tat = tonumber(redis.call('GET', totalkey) or '0')
end
local out = {-1, #lostkeys, now, refunds}
for _, k in ipairs(lostkeys) do out[#out + 1] = k end
if max > 0 then
  local cand = redis.call('ZRANGEBYSCORE', due, '-inf', horizon, 'WITHSCORES', 'LIMIT', 0, max)
  local ks, slots, dues, nexts = {}, {}, {}, {}
  local si = 1
  for i = 1, #cand, 2 do
    local d = tonumber(cand[i + 1])
    local slot = d
    if ext and total > 0 then
      -- The first reserved slot the key may take (≥ its due time); slots skipped here
      -- stay unused and the caller offers them to other partitions or gives them back.
      while si <= #xslots and xslots[si] < d do si = si + 1 end
      if si > #xslots then break end
      slot = xslots[si]
      si = si + 1
    else
      if slot < now then slot = now end
      if total > 0 and slot < tat then slot = tat end
      if slot > horizon then break end
      if total > 0 then tat = slot + total end
    end
    ks[#ks + 1] = cand[i]
    slots[#slots + 1] = slot
    dues[#dues + 1] = d
    nexts[#nexts + 1] = slot + every
  end
  if #ks > 0 then
    -- Fencing tokens: one INCRBY for the batch (the counter starts at now, see above).
    local base = redis.call('INCRBY', fencekey, #ks) - #ks
    if base < now then
      base = now
      redis.call('SET', fencekey, string.format('%.0f', now + #ks))
    end
    -- One command per kind for the whole batch (see release_fn.lua).
    local zl, hs = {}, {}
    for j = 1, #ks do
      zl[#zl + 1] = slots[j] + leasefor
      zl[#zl + 1] = ks[j]
      hs[#hs + 1] = ks[j]
      hs[#hs + 1] = owner .. '#' .. string.format('%.0f', base + j) .. ' ' .. string.format('%.0f', nexts[j])
    end
    redis.call('ZREM', due, unpack(ks))
    redis.call('ZADD', lease, unpack(zl))
    redis.call('HSET', held, unpack(hs))
    if redis.call('EXISTS', dirty) == 1 then redis.call('HDEL', dirty, unpack(ks)) end
    local tries = {}
    if redis.call('EXISTS', try) == 1 then tries = redis.call('HMGET', try, unpack(ks)) end
    for j = 1, #ks do
      out[#out + 1] = ks[j]
      out[#out + 1] = slots[j]
      out[#out + 1] = dues[j]
      out[#out + 1] = tries[j] or false
      out[#out + 1] = base + j
    end
    if total > 0 and not ext then
      redis.call('SET', totalkey, string.format('%.0f', tat))
    end
  end
end

-- 3. When to come back.
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if first[2] then
  local nx = tonumber(first[2])
  if total > 0 and not ext and nx < tat then nx = tat end
  out[1] = nx
end
return out
