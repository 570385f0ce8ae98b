package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// TestBreakerRecords: each drainer's record is read back until its own expiry (a drainer
// that died drops out, and its short-lived record does not shorten the others'), a newer
// write replaces a drainer's record, and a cleared one is gone.
func TestBreakerRecords(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	now := time.Now()
	for _, rec := range []queue.BreakerRecord{
		{Drainer: "a", State: "open", Since: now, NextProbe: now.Add(5 * time.Second), Expires: now.Add(time.Minute)},
		{Drainer: "b", State: "closed", Since: now, Expires: now.Add(time.Minute)},
		{Drainer: "c", State: "open", Since: now.Add(-2 * time.Minute), Expires: now.Add(time.Second)}, // its drainer died
	} {
		if err := s.Steering.SetBreaker(ctx, "r", rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Steering.Breakers(ctx, "r", now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, r := range got {
		states[r.Drainer] = r.State
		if r.Drainer == "a" && !r.NextProbe.Equal(now.Add(5*time.Second)) {
			t.Errorf("a's next probe %v", r.NextProbe)
		}
	}
	if len(states) != 2 || states["a"] != "open" || states["b"] != "closed" {
		t.Fatalf("records %v, want a open and b closed (c expired)", states)
	}
	if err := s.Steering.SetBreaker(ctx, "r", queue.BreakerRecord{Drainer: "a", State: "half_open", Since: now, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Steering.ClearBreaker(ctx, "r", "b"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Steering.Breakers(ctx, "r", now.Add(2*time.Second))
	if len(got) != 1 || got[0].Drainer != "a" || got[0].State != "half_open" {
		t.Fatalf("after a's change and b's clear: %+v", got)
	}
	if got, err := s.Steering.Breakers(ctx, "other", now); err != nil || len(got) != 0 {
		t.Fatalf("a rule without records: %v, %v", got, err)
	}
}

// TestOwnSteerEntries: steering entries written with a renewal are read by the partitions'
// next owner; an empty map clears a partition's.
func TestOwnSteerEntries(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	own := func(steer map[int]map[string]string) {
		t.Helper()
		o := s.Ownership.Own(ctx, time.Time{}, []queue.OwnRequest{{Rule: "r", Owner: "A", Partitions: 4, Lease: time.Second, Steer: steer}})[0]
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	own(map[int]map[string]string{1: {"k1": "0.5 0.9 0"}, 2: {"k2": "0.25 0.5 0"}})
	got, err := s.Steering.SteerStates(ctx, "r", []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["k1"] != "0.5 0.9 0" || got["k2"] != "0.25 0.5 0" {
		t.Fatalf("SteerStates = %v", got)
	}
	own(map[int]map[string]string{1: {}})
	if got, _ := s.Steering.SteerStates(ctx, "r", []int{1, 2}); len(got) != 1 || got["k2"] == "" {
		t.Fatalf("after clearing partition 1: %v, want k2 only", got)
	}
}
