package queue

import (
	"context"
	_ "embed"
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

// inflightScript takes a slot (inflight.lua): its answer bounds how long a waiter may wait
// for a slot freed by a crash.
var (
	//go:embed inflight.lua
	inflightSrc    string
	inflightScript = redis.NewScript(inflightSrc)
)

func (s *store) inflightKey(rule string) string {
	return s.prefix + "sl:{" + partTag(rule, 0) + "}:inflight"
}

// AcquireInFlight takes one of rule's capacity slots for deliveries in flight, under member
// (unique per delivery), for at most lease. ok is false when all are taken; wait is then
// when the earliest slot's lease ends (a slot given back by ReleaseInFlight frees sooner).
func (s SinkSlots) Acquire(ctx context.Context, rule, member string, capacity int, lease time.Duration) (ok bool, wait time.Duration, err error) {
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
func (s SinkSlots) Release(ctx context.Context, rule, member string) error {
	if err := s.rdb.ZRem(ctx, s.inflightKey(rule), member).Err(); err != nil {
		return fmt.Errorf("queue: give back an in-flight slot of rule %s: %w", rule, err)
	}
	return nil
}

// InFlight is how many of rule's slots are taken (leases not yet ended included).
func (s SinkSlots) InFlight(ctx context.Context, rule string) (int64, error) {
	return s.rdb.ZCard(ctx, s.inflightKey(rule)).Result()
}
