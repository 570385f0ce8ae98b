-- admit.lua: admission's Redis side for the claim engine, in one script: make keys due whose
-- messages were stored (marks), count messages into their keys' depths and answer each
-- key's depth and next slot (counts), and make the keys of counted messages that were
-- already stored due too (stored counts). Every call of the admission pipeline
-- (AdmitPipeline) and MarkDue is this script with some of the three parts empty: marks
-- alone (MarkDue), counts while the publishes run (a single admission), marks of earlier
-- admissions with this batch's counts (the pipeline's usual call), counts of stored messages
-- (a batch submission, once its publishes are answered). One call, one read of the keys' due
-- scores: a script call's fixed cost is several times that of the commands it runs, and the
-- calls were most of what admission cost Redis. Under the own engine admission sends none.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] dirty  HASH  key -> "1"
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
-- KEYS[5] held   HASH  key -> "<owner> <next µs>" (claimed keys)
-- KEYS[6] depth  the partition's depth key: key -> messages queued, as counted by admissions
--                and releases, in the HASH depth .. ':' .. b of the key's bucket b
--
-- ARGV[1] now of the marks: µs since the Unix epoch; 0 = Redis's own clock (TIME)
-- ARGV[2] m, the number of keys to mark
-- ARGV[3 .. 2+m] the keys to mark
-- then five values per counted message, in admission order: key, capacity of its queue, now
-- (µs since the Unix epoch), 1 if the message is stored (its key is made due after the
-- counts, at the latest now of the stored messages) or 0, the key's depth bucket
-- (partition.go). A key may appear more than once: each message counts.
--
-- Returns {depth1, next1, held1, depth2, next2, held2, ..., added} (integers): for each
-- counted message its key's depth counting it, the µs at which the key's next message may
-- leave (now when nothing holds it back) and 1 if a drainer holds the key (then its head is
-- being delivered, is still counted in depth, and next is the slot after that head's); last,
-- the number of keys the marks newly added to `due`.
--
-- Marks. A key already due keeps its score (ZADD NX): its pacing is not reset. A claimed key
-- is not added to `due` (that would let a second drainer pop it concurrently); instead it is
-- flagged dirty, so that a drainer which found it empty just before this message arrived
-- puts it back instead of dropping it (release.lua "empty"). Because admission marks only
-- after the publish was acknowledged, either the drainer's pop sees the message, or this
-- script runs after that pop — while the key is still claimed (dirty flag) or after it was
-- dropped (ZADD).
--
-- Counts. The counter is an estimate: a publish that fails is counted out again by the
-- ingress, a lost count (crash) is healed when the key empties (release_fn.lua), when the
-- stream refuses a message as full (SetDepth) or by the reconciler. It is clamped to
-- [1, capacity], the range the queue is in whenever the message is stored. A key's messages
-- are counted with one HINCRBY for all of them.

-- clock(now) is now (µs since the Unix epoch), or Redis's own clock (TIME) when now is 0.
local function clock(now)
  if now ~= 0 then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- mark_one(due, lease, dirty, idle, k, now) makes key k, which is not due, due: at now, or at
-- its idle slot when that is later. A key a drainer holds (leased) is flagged dirty instead.
-- Returns the score it was given and ZADD's answer, or nil and 0 when flagged.
local function mark_one(due, lease, dirty, idle, k, now)
  if redis.call('ZSCORE', lease, k) then
    redis.call('HSET', dirty, k, '1')
    return nil, 0
  end
  local at = now
  local slot = redis.call('ZSCORE', idle, k)
  if slot then
    at = math.max(now, tonumber(slot))
    redis.call('ZREM', idle, k)
  end
  local score = string.format('%.0f', at)
  return score, redis.call('ZADD', due, 'NX', score, k)
end

-- next_slot(idle, held, k, score, now) is when key k's next message may leave: its due score
-- (nil when it is not due), else its idle slot, else the next slot of the drainer that holds
-- it; never before now. The second result is 1 when a drainer holds it.
local function next_slot(idle, held, k, score, now)
  local nxt = score or redis.call('ZSCORE', idle, k)
  local isheld = 0
  if not nxt then
    local h = redis.call('HGET', held, k)
    if h then
      nxt = string.match(h, '^%S+ (%S+)$')
      isheld = 1
    end
  end
  nxt = tonumber(nxt or now)
  if nxt < now then nxt = now end
  return nxt, isheld
end

local due, lease, dirty, idle, held, depth = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local m = tonumber(ARGV[2])
local first = 3 + m
local ks = {}
for i = 3, 2 + m do ks[#ks + 1] = ARGV[i] end
for i = first, #ARGV, 5 do ks[#ks + 1] = ARGV[i] end
if #ks == 0 then return {0} end
local dues = redis.call('ZMSCORE', due, unpack(ks))

-- Marks, first: a count in this call may come from a client that saw a marked admission's
-- answer.
local added, scores = 0, {}
if m > 0 then
  local now = clock(tonumber(ARGV[1]))
  redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
  for j = 1, m do
    local k = ks[j]
    if not (dues[j] or scores[k]) then -- a key already due keeps its score
      local score, n = mark_one(due, lease, dirty, idle, k, now)
      scores[k] = score
      added = added + n
    end
  end
end

-- Counts: one HINCRBY per key for all its messages, then each message's depth in order,
-- clamped, and the counter set once when a clamp changed it.
local count, base, depths, order = {}, {}, {}, {}
for j = m + 1, #ks do
  local k = ks[j]
  if count[k] == nil then
    count[k] = 0
    order[#order + 1] = j
  end
  count[k] = count[k] + 1
end
local function arg(j, f) return ARGV[first + 5 * (j - m - 1) + f] end
for _, j in ipairs(order) do
  local k, c = ks[j], count[ks[j]]
  base[k] = redis.call('HINCRBY', depth .. ':' .. arg(j, 4), k, c) - c
  depths[k] = base[k]
end
local out = {}
local marknow = nil
for j = m + 1, #ks do
  local k, cap, now = ks[j], tonumber(arg(j, 1)), tonumber(arg(j, 2))
  local n = depths[k] + 1
  if n > cap then
    n = cap
  elseif n < 1 then
    n = 1
  end
  depths[k] = n
  local nxt, isheld = next_slot(idle, held, k, dues[j] or scores[k], now)
  out[#out + 1] = n
  out[#out + 1] = nxt -- µs below 2^53: exact as a Lua number, an integer reply
  out[#out + 1] = isheld
  if arg(j, 3) == '1' and (marknow == nil or now > marknow) then marknow = now end
end
for _, j in ipairs(order) do
  local k = ks[j]
  if depths[k] ~= base[k] + count[k] then redis.call('HSET', depth .. ':' .. arg(j, 4), k, depths[k]) end
end

-- Stored counts: their keys made due after the counts (counting changes no due score, so the
-- scores read above are the marks' too).
if marknow ~= nil then
  redis.call('ZREMRANGEBYSCORE', idle, '-inf', marknow)
  for j = m + 1, #ks do
    local k = ks[j]
    if arg(j, 3) == '1' and not (dues[j] or scores[k]) then
      local score, n = mark_one(due, lease, dirty, idle, k, marknow)
      scores[k] = score
      added = added + n
    end
  end
end
out[#out + 1] = added
return out
