-- admit_fn.lua: the steps of admission that markdue.lua, admitcount.lua, admitmark.lua and
-- markcount.lua share (prepended to each by the Go code; not a script on its own).

-- clock(now) is now (µs since the Unix epoch), or Redis's own clock (TIME) when now is 0.
local function clock(now)
  if now ~= 0 then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- count_one(depth, k, bucket, cap) counts one message into key k's depth (admitcount.lua):
-- the counter in the hash depth .. ':' .. bucket, clamped to [1, cap], the range the queue
-- is in whenever the message is stored. Returns the key's depth, counting the message.
local function count_one(depth, k, bucket, cap)
  local dk = depth .. ':' .. bucket
  local n = redis.call('HINCRBY', dk, k, 1)
  if n > cap then
    n = cap
    redis.call('HSET', dk, k, n)
  elseif n < 1 then
    n = 1
    redis.call('HSET', dk, k, n)
  end
  return n
end

-- mark_one(due, lease, dirty, idle, k, now) makes key k, which is not due, due (markdue.lua):
-- at now, or at its idle slot when that is later. A key a drainer holds (leased) is flagged
-- dirty instead. Returns the score it was given and ZADD's answer, or nil when flagged.
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

-- next_slot(idle, held, k, score, now) is when key k's next message may leave
-- (admitcount.lua): its due score (nil when it is not due), else its idle slot, else the
-- next slot of the drainer that holds it; never before now. The second result is 1 when a
-- drainer holds it.
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
