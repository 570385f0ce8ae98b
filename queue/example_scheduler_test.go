package queue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/queue"
)

// The outflow is paced in Redis, so any number of drainers share it: a key that has
// messages is marked due; a claim takes the keys whose slot has come, leases them to one
// drainer and moves each key's next slot one interval on (here 10/s per key: every
// 100 ms); releasing a key after its delivery lets it be claimed at that next slot. Times
// are given explicitly, as tests do; drainers pass the zero time and run on Redis's clock.
// (miniredis stands in for Redis here; it runs the same scripts.)
func ExampleScheduler() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	pace := queue.Outflow{Every: 100 * time.Millisecond}

	if _, err := s.Claims.MarkDueAt(ctx, "orders", t0, "m-42", "m-7"); err != nil { // after two publishes
		log.Fatal(err)
	}
	claim := func(at time.Time) []queue.Claim {
		c, err := s.Claims.Claim(ctx, "orders", at, queue.ClaimRequest{Outflow: pace, Owner: "drainer-1", Max: 10, Lease: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		return c.Claims
	}
	for _, c := range claim(t0) {
		fmt.Printf("claimed %s, slot +%v\n", c.Key, c.Slot.Sub(t0))
		// … deliver the key's head, delete it; the key still has messages:
		if _, err := s.Claims.Release(ctx, "orders", "drainer-1", 0, queue.Release{Key: c.Key, Mode: queue.Released, Fence: c.Fence}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("claimed again at +50ms: %d keys\n", len(claim(t0.Add(50*time.Millisecond))))
	for _, c := range claim(t0.Add(100 * time.Millisecond)) {
		fmt.Printf("claimed %s, slot +%v\n", c.Key, c.Slot.Sub(t0))
	}
	// Unordered output:
	// claimed m-42, slot +0s
	// claimed m-7, slot +0s
	// claimed again at +50ms: 0 keys
	// claimed m-42, slot +100ms
	// claimed m-7, slot +100ms
}
