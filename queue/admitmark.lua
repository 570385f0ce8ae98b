-- admitmark.lua: admitcount.lua and markdue.lua of a batch submission in one call, once
-- its publishes are answered: count every message into its key's depth and answer each
-- key's depth and next slot (admitcount.lua, all messages first, in order), then make the
-- keys of the stored messages due (markdue.lua). The same as the two scripts called one
-- after the other, for one script call and one read of the keys' due scores instead of two:
-- counting changes no due score, so the scores read for the counts are the marks' too.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] held   HASH  key -> "<owner> <next µs>" (claimed keys)
-- KEYS[3] depth  the partition's depth key: key -> messages queued in the HASH
--                depth .. ':' .. b of the key's bucket b (admitcount.lua)
-- KEYS[4] idle   ZSET  key -> next slot of a key that recently left `due` empty (µs)
-- KEYS[5] lease  ZSET  key -> lease expiry (µs)
-- KEYS[6] dirty  HASH  key -> "1"
--
-- ARGV: five values per message, in admission order: key, capacity of its queue, now (µs
-- since the Unix epoch), 1 if the message was stored (its key is marked due) or 0 (counted
-- only: its caller counts it out or heals the count, as after admitcount.lua), the key's
-- depth bucket. The marks use the latest now of the stored messages.
--
-- Returns what admitcount.lua returns: {depth1, next1, held1, ...}.

local due, held, depth, idle, lease, dirty = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ks = {}
for i = 1, #ARGV, 5 do ks[#ks + 1] = ARGV[i] end
if #ks == 0 then return {} end
local dues = redis.call('ZMSCORE', due, unpack(ks))
-- The depths are counted per distinct key, not per message: one HINCRBY by the key's number
-- of messages c in the call gives the count s before them (a batch submission is often many
-- messages of one key). Each message's depth is then s plus one per message, clamped as
-- admitcount.lua clamps per message, and a key whose clamped depth is not s + c is set to it.
local count, base, depths, order = {}, {}, {}, {}
for j = 1, #ks do
  local k = ks[j]
  if count[k] == nil then
    count[k] = 0
    order[#order + 1] = j
  end
  count[k] = count[k] + 1
end
for _, j in ipairs(order) do
  local k = ks[j]
  local c = count[k]
  base[k] = redis.call('HINCRBY', depth .. ':' .. ARGV[5 * j], k, c) - c
  depths[k] = base[k]
end
local out = {}
local marknow = nil
for j = 1, #ks do
  local i = 5 * j - 4
  local k, cap, now = ks[j], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local n = depths[k] + 1
  if n > cap then
    n = cap
  elseif n < 1 then
    n = 1
  end
  depths[k] = n
  local nxt, isheld = next_slot(idle, held, k, dues[j], now)
  out[#out + 1] = n
  out[#out + 1] = nxt
  out[#out + 1] = isheld
  if ARGV[i + 3] == '1' and (marknow == nil or now > marknow) then marknow = now end
end
for _, j in ipairs(order) do
  local k = ks[j]
  if depths[k] ~= base[k] + count[k] then redis.call('HSET', depth .. ':' .. ARGV[5 * j], k, depths[k]) end
end
if marknow == nil then return out end

-- markdue.lua, on the stored messages' keys.
local now = marknow
redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
for j = 1, #ks do
  local k = ks[j]
  if ARGV[5 * j - 1] == '1' and not dues[j] then -- stored, and not due yet
    mark_one(due, lease, dirty, idle, k, now)
  end
end
return out
