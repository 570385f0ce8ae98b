package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// TestOwnershipReportsKeysInFlight: drainers' reports of keys in flight, sent with their
// renewals, add up in Ownership.InFlight; a drainer that stops renewing stops counting once
// its announcement expires (one lease), and the next report of any drainer removes its field,
// so the hash holds one field per live drainer; a report of 0 and a leave remove the
// drainer's own field.
func TestOwnershipReportsKeysInFlight(t *testing.T) {
	t.Parallel()
	testOwnershipReportsKeysInFlight(t, redistest.Shared(t).Client(t))
}

// TestOwnershipReportsKeysInFlightOnCluster: the same on a Redis Cluster (3 masters): the
// report's keys share the rule's ownership slot with own.lua's.
func TestOwnershipReportsKeysInFlightOnCluster(t *testing.T) {
	t.Parallel()
	testOwnershipReportsKeysInFlight(t, redistest.SharedCluster(t).Client(t))
}

func testOwnershipReportsKeysInFlight(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const rule = "r"
	flightKey := prefix + "sl:{" + queue.RuleToken(rule) + ".own}:flight"
	own := func(owner string, at time.Duration, n int, leave bool) {
		t.Helper()
		o := s.Ownership.Own(ctx, t0.Add(at), []queue.OwnRequest{{Rule: rule, Owner: owner, Partitions: 8, Lease: time.Second,
			Leave: leave, ReportInFlight: true, InFlight: n}})[0]
		if o.Err != nil || o.InFlightErr != nil {
			t.Fatal(o.Err, o.InFlightErr)
		}
	}
	inFlight := func(at time.Duration) int64 {
		t.Helper()
		n, err := s.Ownership.InFlight(ctx, rule, t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fields := func() int64 {
		t.Helper()
		n, err := rdb.HLen(ctx, flightKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := inFlight(0); n != 0 {
		t.Fatalf("before any report: %d in flight, want 0", n)
	}
	own("A", 0, 3, false)
	own("B", 100*time.Millisecond, 2, false)
	if n := inFlight(200 * time.Millisecond); n != 5 {
		t.Fatalf("A 3 and B 2: %d in flight, want 5", n)
	}
	// A stops renewing: its announcement ends at 1 s, B's at 1.1 s.
	if n := inFlight(999 * time.Millisecond); n != 5 {
		t.Fatalf("A's announcement not expired yet: %d in flight, want 5", n)
	}
	if n := inFlight(1050 * time.Millisecond); n != 2 {
		t.Fatalf("A dead: %d in flight, want B's 2", n)
	}
	if f := fields(); f != 2 {
		t.Fatalf("%d fields before a live drainer reported, want 2 (A's still there)", f)
	}
	own("B", 1050*time.Millisecond, 2, false)
	if f := fields(); f != 1 {
		t.Fatalf("%d fields after B reported, want 1: A's removed", f)
	}
	// A comes back (a new announcement): it counts again.
	own("A", 1200*time.Millisecond, 4, false)
	if n := inFlight(1300 * time.Millisecond); n != 6 {
		t.Fatalf("A back with 4, B 2: %d in flight, want 6", n)
	}
	own("B", 1400*time.Millisecond, 0, false)
	if n, f := inFlight(1500*time.Millisecond), fields(); n != 4 || f != 1 {
		t.Fatalf("B reported 0: %d in flight in %d fields, want 4 in A's only", n, f)
	}
	own("A", 1600*time.Millisecond, 4, true)
	if n, f := inFlight(1700*time.Millisecond), fields(); n != 0 || f != 0 {
		t.Fatalf("A left: %d in flight in %d fields, want none", n, f)
	}
}
