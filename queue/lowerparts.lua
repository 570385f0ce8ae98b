-- lowerparts.lua: lower a rule's partition high-water mark (parts.lua) once the reconciler
-- found no key left in the partitions above the new count; compare-and-set, so a mark raised
-- meanwhile by a process using more partitions is kept.
--
-- KEYS[1] parts  STRING  sl:{t}:parts
--
-- ARGV[1] was    the mark the reconciler read
-- ARGV[2] to     the new mark
--
-- Returns 0.
if tonumber(redis.call('GET', KEYS[1]) or '0') == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
end
return 0
