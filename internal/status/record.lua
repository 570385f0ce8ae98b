-- record.lua: set the state of one message's status record.
--
-- KEYS[1]  status hash of the message (<prefix>sl:m:{<id>})
-- ARGV[1]  state (queued | parked | delivering | delivered | retrying | dead)
-- ARGV[2]  attempts (integer)
-- ARGV[3]  now, unix microseconds (becomes updated_at)
-- ARGV[4]  last error ("" to clear)
-- ARGV[5]  TTL in milliseconds, refreshed on every change
-- ARGV[6]  retry_at, unix microseconds (0 = leave unchanged)
--
-- The record is created if missing: a drainer may report a state before the ingress's
-- own write of the record lands, and the ingress's write never overwrites a state
-- (see Store.PutPipe), so the newest state always wins.
-- Returns 1.
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'attempts', ARGV[2], 'updated_at', ARGV[3], 'last_error', ARGV[4])
if tonumber(ARGV[6]) > 0 then
  redis.call('HSET', KEYS[1], 'retry_at', ARGV[6])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
