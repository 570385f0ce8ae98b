-- release.lua: a drainer hands back keys it claimed (claim.lua), after popping their head.
--
-- KEYS[1] due    ZSET  key -> next due time (µs)
-- KEYS[2] lease  ZSET  key -> lease expiry (µs)
-- KEYS[3] held   HASH  key -> "<owner> <next>"
-- KEYS[4] dirty  HASH  key -> "1" when MarkDue ran while the key was claimed
-- KEYS[5] total  STRING     the rule's total_outflow meter (µs)
-- KEYS[6] try    HASH  key -> "<msg id>\n<attempts>\n<last error>"
-- KEYS[7] depth  HASH  key -> messages queued, as counted by admissions (admitmark.lua):
--                      "next" counts one message out, "empty" forgets the key
--
-- ARGV[1] owner  the drainer that claimed the keys
-- ARGV[2] total  µs between two messages of the rule (1/total_outflow); 0 = none
-- then one group of four per key:
-- ARGV[3+4i] key
-- ARGV[4+4i] mode   "next":  the head was delivered (or dead) and deleted; the key is due again at
--                            max(its stored next time, at); its retry state is cleared
--                   "retry": the head stays queued and is retried at max(stored next, at); the
--                            retry state is set to `state`
--                   "later": the head stays queued, nothing is recorded against it (e.g. NATS was
--                            unreachable): the key is due again at max(stored next, at), retry state kept
--                   "empty": the key had no message: it leaves `due`, unless MarkDue ran since the
--                            claim (a message may have arrived after the pop looked), in which case
--                            it is due again at its stored next time; the unused total_outflow slot
--                            is given back
-- ARGV[5+4i] at     µs; 0 = none
-- ARGV[6+4i] state  retry state for "retry" ("" otherwise)
--
-- Returns an array with 1 per key released, 0 per key whose claim this owner no longer holds
-- (its lease expired and it went back to `due`, maybe to another drainer: nothing is changed).

local due, lease, held, dirty, totalkey, try, depth = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local owner = ARGV[1]
local total = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 4 do
  local k, mode, at, state = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local h = redis.call('HGET', held, k)
  local who, nxt
  if h then
    who, nxt = string.match(h, '^(%S+) (%S+)$')
    nxt = tonumber(nxt)
  end
  if who ~= owner then
    out[#out + 1] = 0
  else
    redis.call('ZREM', lease, k)
    redis.call('HDEL', held, k)
    if at > nxt then nxt = at end
    if mode == 'empty' then
      if redis.call('HDEL', dirty, k) == 1 then
        redis.call('ZADD', due, nxt, k)
      else
        redis.call('HDEL', depth, k)
      end
      redis.call('HDEL', try, k)
      if total > 0 then
        local tat = tonumber(redis.call('GET', totalkey) or '0')
        if tat > 0 then
          redis.call('SET', totalkey, string.format('%.0f', tat - total))
        end
      end
    else
      redis.call('HDEL', dirty, k)
      redis.call('ZADD', due, nxt, k)
      if mode == 'retry' then
        redis.call('HSET', try, k, state)
      elseif mode == 'next' then
        redis.call('HDEL', try, k)
        if redis.call('HINCRBY', depth, k, -1) <= 0 then
          redis.call('HDEL', depth, k)
        end
      end
    end
    out[#out + 1] = 1
  end
end
return out
