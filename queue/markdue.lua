-- markdue.lua: keys got a message; make them due (the ingress calls this after a successful publish).
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] dirty  HASH  key -> "1"
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
--
-- ARGV[1] now    µs since the Unix epoch; 0 = Redis's own clock (TIME)
-- ARGV[2..] keys
--
-- Returns the number of keys newly added to `due`.
--
-- A key already due keeps its score (ZADD NX): its pacing is not reset. A claimed key is not
-- added to `due` (that would let a second drainer pop it concurrently); instead it is flagged
-- dirty, so that a drainer which found it empty just before this message arrived puts it back
-- instead of dropping it (release.lua "empty"). Because the ingress marks only after the
-- publish was acknowledged, either the drainer's pop sees the message, or this script runs
-- after that pop — while the key is still claimed (dirty flag) or after it was dropped (ZADD).

local due, lease, dirty, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = clock(tonumber(ARGV[1]))
local added = 0
-- A key that emptied keeps its next slot in `idle` until that slot has passed: a message
-- arriving before then is due at that slot, not now, so the key never goes faster than its
-- outflow. Slots in the past are forgotten here.
redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
local ks = {}
for i = 2, #ARGV do ks[#ks + 1] = ARGV[i] end
if #ks == 0 then return 0 end
-- Every key's due score in one call: a redis.call costs several times the command it runs,
-- and under a flood most keys are already due.
local dues = redis.call('ZMSCORE', due, unpack(ks))
for j = 1, #ks do
  local k = ks[j]
  -- A key already due keeps its score. A due key is never leased (a claim moves it out of
  -- `due`), and a stale `idle` slot is swept above.
  if not dues[j] then
    local _, n = mark_one(due, lease, dirty, idle, k, now)
    added = added + n
  end
end
return added
