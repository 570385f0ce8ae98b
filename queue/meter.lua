-- meter.lua: the total_outflow meter of a partitioned rule (queue.partitions > 1). Its
-- partitions live in other hash slots, so a claim cannot advance the meter in its own script:
-- the caller reserves slots here first, hands them to the partitions' claims (claim.lua's
-- nslots), and gives back what no key used.
--
-- KEYS[1] total  STRING  µs the rule's next message may leave
--
-- ARGV[1] now      0: Redis's own clock (TIME); else µs since the Unix epoch (tests)
-- ARGV[2] every    µs between two messages of the rule (1/total_outflow)
-- ARGV[3] count    reserve up to this many slots (0: none)
-- ARGV[4] ahead    µs: reserve only slots at most now+ahead; -1 = no bound
-- ARGV[5] floor    µs: the first slot is at or after it (0 = none)
-- ARGV[6] refund   slots of emptied keys to give back: the meter moves back refund × every
--                  (as release_fn.lua does for a rule in one partition)
-- ARGV[7] expect   give back a reservation's unused tail: if the meter is still at `expect`
--                  (nobody reserved since), it goes back to ARGV[8]; 0 = nothing to give back
-- ARGV[8] to
--
-- Returns {now, first, n}: n slots reserved, at first, first + every, … (first ≥ now).
-- The meter is one small string touched once per claim call, not once per key.

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local every, count, ahead, floor = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local refund, expect, to = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local tat = tonumber(redis.call('GET', key) or '0')
local changed = false
if expect > 0 and tat == expect then
  tat = to
  changed = true
end
if refund > 0 and tat > 0 then
  tat = tat - refund * every
  changed = true
end
local first, n = now, 0
if count > 0 and every > 0 then
  first = math.max(tat, now, floor)
  n = count
  if ahead >= 0 then
    local room = math.floor((now + ahead - first) / every) + 1
    if room < n then n = room end
    if n < 0 then n = 0 end
  end
  if n > 0 then
    tat = first + n * every
    changed = true
  end
end
if changed then redis.call('SET', key, string.format('%.0f', tat)) end
return {now, first, n}
