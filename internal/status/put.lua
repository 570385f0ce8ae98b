-- put.lua: write a message's status record at admission.
--
-- KEYS[1]  status hash of the message (<prefix>sl:m:{<id>})
-- ARGV[1]  domain
-- ARGV[2]  rule
-- ARGV[3]  key
-- ARGV[4]  state (queued | parked)
-- ARGV[5]  created_at, unix microseconds (also the first updated_at)
-- ARGV[6]  retry_at, unix microseconds (0 = none)
-- ARGV[7]  last error ("" = none)
-- ARGV[8]  TTL in milliseconds
-- ARGV[9]  "1" to overwrite the state (a re-admission: parked → queued), "0" to write it
--          only if the record has none (a drainer may already have reported a later state:
--          it can pop the message before the admission's write lands)
--
-- Returns 1.
local k = KEYS[1]
redis.call('HSET', k, 'domain', ARGV[1], 'rule', ARGV[2], 'key', ARGV[3], 'created_at', ARGV[5])
if ARGV[9] == '1' or redis.call('HEXISTS', k, 'state') == 0 then
  redis.call('HSET', k, 'state', ARGV[4], 'updated_at', ARGV[5], 'last_error', ARGV[7])
  if redis.call('HEXISTS', k, 'attempts') == 0 then
    redis.call('HSET', k, 'attempts', 0)
  end
  if tonumber(ARGV[6]) > 0 then
    redis.call('HSET', k, 'retry_at', ARGV[6])
  end
end
redis.call('PEXPIRE', k, ARGV[8])
return 1
