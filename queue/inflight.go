package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A rule's deliveries in flight over all its keys and every drainer (the rules file's
// sink.max_in_flight) are counted in one sorted set in the rule's partition 0:
//
//	<prefix>sl:{<rule token>}:inflight   ZSET  member <drainer>#<n>, score: its lease's end (ms, Redis's clock)
//
// A drainer adds a member before a delivery when fewer than the cap are there, and removes
// it when the delivery ends. A member whose drainer died is dropped when its lease ends
// (the sink's timeout and a margin), so a crash costs a slot that long and no more. The
// set is as large as the cap at most, and expires when no delivery has started for a lease.

// inflightScript takes a slot. KEYS[1] the set; ARGV[1] member, ARGV[2] cap, ARGV[3] lease
// (ms). Answers 1 when the slot was taken, else the ms until the earliest lease in the set
// ends (at least 1), a bound on how long a waiter may wait for a slot freed by a crash.
//
// A member already in the set holds its slot (a take whose answer was lost and is sent
// again). The set's TTL is only ever extended, to the longest lease in it: members with
// longer leases (another drainer's -lease, a sink.timeout changed by a reload) are never
// dropped with the set before their own lease ends.
var inflightScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return -math.max(1, tonumber(first[2]) - now)
  end
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
`)

func (s *Scheduler) inflightKey(rule string) string {
	return s.prefix + "sl:{" + partTag(rule, 0) + "}:inflight"
}

// AcquireInFlight takes one of rule's capacity slots for deliveries in flight, under member
// (unique per delivery), for at most lease. ok is false when all are taken; wait is then
// when the earliest slot's lease ends (a slot given back by ReleaseInFlight frees sooner).
func (s *Scheduler) AcquireInFlight(ctx context.Context, rule, member string, capacity int, lease time.Duration) (ok bool, wait time.Duration, err error) {
	n, err := inflightScript.Run(ctx, s.rdb, []string{s.inflightKey(rule)}, member, capacity, lease.Milliseconds()).Int64()
	if err != nil {
		return false, 0, fmt.Errorf("queue: take an in-flight slot of rule %s: %w", rule, err)
	}
	if n == 1 {
		return true, 0, nil
	}
	return false, time.Duration(-n) * time.Millisecond, nil
}

// ReleaseInFlight gives back the slot member took.
func (s *Scheduler) ReleaseInFlight(ctx context.Context, rule, member string) error {
	if err := s.rdb.ZRem(ctx, s.inflightKey(rule), member).Err(); err != nil {
		return fmt.Errorf("queue: give back an in-flight slot of rule %s: %w", rule, err)
	}
	return nil
}

// InFlight is how many of rule's slots are taken (leases not yet ended included).
func (s *Scheduler) InFlight(ctx context.Context, rule string) (int64, error) {
	return s.rdb.ZCard(ctx, s.inflightKey(rule)).Result()
}
