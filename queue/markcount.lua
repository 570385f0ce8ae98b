-- markcount.lua: markdue.lua and admitcount.lua in one call, for the ingress's batches. A
-- batch holds both: the keys of earlier admissions whose publishes were acknowledged (made
-- due, markdue.lua) and this batch's admissions (counted, admitcount.lua), marks first. The
-- same as the two scripts called one after the other, for one script call and one read of
-- the keys' due scores instead of two: a script call's fixed cost is several times that of
-- the commands it runs, and the two were most of what admission cost Redis.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] dirty  HASH  key -> "1"
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
-- KEYS[5] held   HASH  key -> "<owner> <next µs>" (claimed keys)
-- KEYS[6] depth  the partition's depth key (admitcount.lua)
--
-- ARGV[1] now of the marks (µs since the Unix epoch; 0 = Redis's own clock)
-- ARGV[2] m, the number of keys to mark
-- ARGV[3 .. 2+m] the keys to mark
-- then four values per admission, as admitcount.lua takes them: key, capacity, now (µs),
-- the key's depth bucket.
--
-- Returns what admitcount.lua returns: {depth1, next1, held1, ...}.

local due, lease, dirty, idle, held, depth = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = clock(tonumber(ARGV[1]))
local m = tonumber(ARGV[2])
local first = 3 + m
local ks = {}
for i = 3, 2 + m do ks[#ks + 1] = ARGV[i] end
for i = first, #ARGV, 4 do ks[#ks + 1] = ARGV[i] end
if #ks == 0 then return {} end
-- The due scores of every key, marked or counted, in one call. A mark never changes a score
-- that was read; the scores it adds are kept in `added` for the counts that follow.
local dues = redis.call('ZMSCORE', due, unpack(ks))
local added = {}

-- markdue.lua
if m > 0 then
  redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
end
for j = 1, m do
  local k = ks[j]
  if not (dues[j] or added[k]) then -- a key already due keeps its score
    added[k] = mark_one(due, lease, dirty, idle, k, now)
  end
end

-- admitcount.lua
local out = {}
for j = m + 1, #ks do
  local i = first + 4 * (j - m - 1)
  local k, cnow = ks[j], tonumber(ARGV[i + 2])
  local n = count_one(depth, k, ARGV[i + 3], tonumber(ARGV[i + 1]))
  local nxt, isheld = next_slot(idle, held, k, dues[j] or added[k], cnow)
  out[#out + 1] = n
  out[#out + 1] = nxt
  out[#out + 1] = isheld
end
return out
