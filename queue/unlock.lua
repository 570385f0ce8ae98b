-- unlock.lua: release a lock only if it is still held by the caller.
--
-- KEYS[1] lock   STRING  the holder's token
--
-- ARGV[1] token  the caller's token
--
-- Returns 1 when the lock was deleted, else 0 (expired, or taken by another since).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
