-- admitcount.lua: count messages being admitted into their keys' queues, before their
-- publishes are acknowledged, and answer each key's depth and next slot for the ingress's
-- answer (X-RateLimit-Remaining, eta) without asking the stream. The keys are made due by
-- markdue.lua once the publishes are acknowledged.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] held   HASH  key -> "<owner> <next µs>" (claimed keys)
-- KEYS[3] depth  the partition's depth key: key -> messages queued, as counted by admissions
--                and releases, in the HASH depth .. ':' .. b of the key's bucket b
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
--
-- ARGV: four values per message, in admission order: key, capacity of its queue, now (µs
-- since the Unix epoch), the key's depth bucket (partition.go). A key may appear more than
-- once: each message counts.
--
-- Returns {depth1, next1, held1, depth2, next2, held2, ...} (integers): each key's depth
-- counting its message, the µs at which the key's next message may leave (now when nothing
-- holds it back), and 1 if a drainer holds the key: then its head is being delivered, is
-- still counted in depth, and next is the slot after that head's.
--
-- One call counts a whole batch of admissions: a script's fixed cost is several times that
-- of the commands it runs, so the ingress pays it once per round trip, not per message.
--
-- The counter is an estimate: a publish that fails is counted out again by the ingress, a
-- lost count (crash) is healed when the key empties (release_fn.lua), when the stream
-- refuses a message as full (SetDepth) or by the reconciler. It is clamped to
-- [1, capacity], the range the queue is in whenever the message is stored.

local due, held, depth, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ks = {}
for i = 1, #ARGV, 4 do ks[#ks + 1] = ARGV[i] end
-- Every key's due score in one call: a redis.call costs several times the command it runs.
local dues = redis.call('ZMSCORE', due, unpack(ks))
local out = {}
for j = 1, #ks do
  local i = 4 * j - 3
  local k, now = ks[j], tonumber(ARGV[i + 2])
  local n = count_one(depth, k, ARGV[i + 3], tonumber(ARGV[i + 1]))
  local nxt, isheld = next_slot(idle, held, k, dues[j], now)
  out[#out + 1] = n
  out[#out + 1] = nxt -- µs below 2^53: exact as a Lua number, an integer reply
  out[#out + 1] = isheld
end
return out
