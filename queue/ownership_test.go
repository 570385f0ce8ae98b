package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// TestOwnershipSharesRenewsAndFences: one drainer owns every partition; a second one joins
// and each ends with half (the first gives up its surplus at its next renewal); a drainer
// that stops renewing loses its partitions once its leases expire, and every acquisition
// carries a larger fencing token than any before; leaving frees partitions at once.
func TestOwnershipSharesRenewsAndFences(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	ctx := context.Background()
	own := func(s *queue.Scheduler, owner string, at time.Duration, leave bool, giveUp ...int) queue.Owned {
		t.Helper()
		o := s.Ownership.Own(ctx, t0.Add(at), []queue.OwnRequest{{Rule: "r", Owner: owner, Partitions: 8, Lease: time.Second, Leave: leave, GiveUp: giveUp}})[0]
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o
	}
	a := own(ss[0], "A", 0, false)
	if len(a.Fences) != 8 || a.Members != 1 {
		t.Fatalf("A alone: %+v, want 8 partitions", a)
	}
	var maxFence int64
	for _, f := range a.Fences {
		maxFence = max(maxFence, f)
	}
	// B joins: nothing is free yet, so B gets nothing until A gives up its surplus.
	if b := own(ss[1], "B", 100*time.Millisecond, false); len(b.Fences) != 0 || b.Members != 2 {
		t.Fatalf("B joining: %+v, want no partition yet and 2 members", b)
	}
	// A is told half its partitions are surplus; it keeps them (still delivering what it
	// started) until it names them in its next call.
	a1 := own(ss[0], "A", 150*time.Millisecond, false)
	if len(a1.Fences) != 8 || len(a1.Surplus) != 4 {
		t.Fatalf("A after B joined: %+v, want 8 partitions of which 4 surplus", a1)
	}
	if b := own(ss[1], "B", 160*time.Millisecond, false); len(b.Fences) != 0 {
		t.Fatalf("B took partitions A had not given up: %+v", b)
	}
	var surplus []int
	for p := range a1.Surplus {
		surplus = append(surplus, p)
	}
	a2 := own(ss[0], "A", 200*time.Millisecond, false, surplus...)
	if len(a2.Fences) != 4 || len(a2.Surplus) != 0 {
		t.Fatalf("A after giving up its surplus: %+v, want 4 partitions", a2)
	}
	for p, f := range a2.Fences {
		if a.Fences[p] != f {
			t.Fatalf("A's renewal changed partition %d's fence %d -> %d", p, a.Fences[p], f)
		}
	}
	b := own(ss[1], "B", 300*time.Millisecond, false)
	if len(b.Fences) != 4 {
		t.Fatalf("B: %d partitions, want 4", len(b.Fences))
	}
	for p, f := range b.Fences {
		if _, dup := a2.Fences[p]; dup {
			t.Fatalf("partition %d owned by both", p)
		}
		if f <= maxFence {
			t.Fatalf("B's fence %d on partition %d not above every earlier one (%d)", f, p, maxFence)
		}
	}
	// A stops renewing (dead or cut off). Before its leases expire B cannot take them…
	if b := own(ss[1], "B", 1100*time.Millisecond, false); len(b.Fences) != 4 {
		t.Fatalf("B took partitions before A's leases expired: %d", len(b.Fences))
	}
	// …after, B owns all 8 (A's announcement expired too).
	b = own(ss[1], "B", 1300*time.Millisecond, false)
	if len(b.Fences) != 8 || b.Members != 1 {
		t.Fatalf("B after A's leases expired: %+v, want 8 partitions", b)
	}
	// B leaves: A gets all of them back at once.
	own(ss[1], "B", 1400*time.Millisecond, true)
	if a := own(ss[0], "A", 1500*time.Millisecond, false); len(a.Fences) != 8 {
		t.Fatalf("A after B left: %d partitions, want 8", len(a.Fences))
	}
}

// TestOwnershipPacesAndRetries: a renewal writes its keys' next allowed times per partition
// (a new owner reads them), an empty map clears them; retry states are kept per key and read
// back for the partitions asked for only; ForgetDue removes keys' due marks.
func TestOwnershipPacesAndRetries(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	next := t0.Add(time.Second)
	req := queue.OwnRequest{Rule: "r", Owner: "A", Partitions: 4, Lease: time.Second,
		Pace: map[int]map[string]time.Time{1: {"a": next, "b": next.Add(time.Second)}}}
	if o := s.Ownership.Own(ctx, t0, []queue.OwnRequest{req})[0]; o.Err != nil {
		t.Fatal(o.Err)
	}
	ps, err := s.Ownership.Paces(ctx, "r", []int{1, 2})
	if err != nil || len(ps) != 2 || !ps["a"].Equal(next) || !ps["b"].Equal(next.Add(time.Second)) {
		t.Fatalf("paces: %v, %v", ps, err)
	}
	req.Pace = map[int]map[string]time.Time{1: {}}
	s.Ownership.Own(ctx, t0.Add(100*time.Millisecond), []queue.OwnRequest{req})
	if ps, err := s.Ownership.Paces(ctx, "r", []int{1}); err != nil || len(ps) != 0 {
		t.Fatalf("paces after clearing: %v, %v", ps, err)
	}
	st := &queue.RetryState{MsgID: "m", Attempts: 2, LastError: "503"}
	keyIn := func(p int) string {
		for i := 0; ; i++ {
			if k := "k" + time.Duration(i).String(); queue.OwnPartitionOf(k, 4) == p {
				return k
			}
		}
	}
	k1, k2 := keyIn(1), keyIn(2)
	if err := s.Ownership.SetOwnRetry(ctx, "r", k1, st); err != nil {
		t.Fatal(err)
	}
	if err := s.Ownership.SetOwnRetry(ctx, "r", k2, st); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Ownership.OwnRetries(ctx, "r", map[int]bool{1: true}, 4)
	if err != nil || len(rs) != 1 || rs[k1] != *st {
		t.Fatalf("retries of partition 1: %v, %v", rs, err)
	}
	if err := s.Ownership.SetOwnRetry(ctx, "r", k1, nil); err != nil {
		t.Fatal(err)
	}
	if rs, _ := s.Ownership.OwnRetries(ctx, "r", map[int]bool{1: true, 2: true}, 4); len(rs) != 1 {
		t.Fatalf("retries after clearing %s: %v", k1, rs)
	}
	if _, err := s.Claims.MarkDueAt(ctx, "r", t0, "x", "y"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ownership.ForgetDue(ctx, "r", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if due, _, err := s.Claims.Counts(ctx, "r"); err != nil || due != 1 {
		t.Fatalf("due after ForgetDue: %d, %v; want 1", due, err)
	}
}

// TestOwnershipPartitionCountMustAgree: a drainer whose partition count differs from the
// one the rule's leases are held under owns nothing (it would own the same keys twice: a
// partition number means other keys under another count), is told the count in force and
// is not counted among the members (the others' shares cover every partition). Once no
// other drainer holds a lease, the count changes to the newcomer's.
func TestOwnershipPartitionCountMustAgree(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	ctx := context.Background()
	own := func(s *queue.Scheduler, owner string, parts int, at time.Duration, leave bool) queue.Owned {
		t.Helper()
		o := s.Ownership.Own(ctx, t0.Add(at), []queue.OwnRequest{{Rule: "r", Owner: owner, Partitions: parts, Lease: time.Second, Leave: leave}})[0]
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o
	}
	if a := own(ss[0], "A", 8, 0, false); len(a.Fences) != 8 || a.Mismatch != 0 {
		t.Fatalf("A alone with 8: %+v", a)
	}
	if b := own(ss[1], "B", 16, 100*time.Millisecond, false); len(b.Fences) != 0 || b.Mismatch != 8 || b.Members != 0 {
		t.Fatalf("B with 16 while A holds 8: %+v, want nothing owned and the count in force (8)", b)
	}
	if a := own(ss[0], "A", 8, 200*time.Millisecond, false); len(a.Fences) != 8 || len(a.Surplus) != 0 || a.Members != 1 {
		t.Fatalf("A after B's attempt: %+v, want all 8 partitions, B not counted", a)
	}
	own(ss[0], "A", 8, 300*time.Millisecond, true) // A stops
	if b := own(ss[1], "B", 16, 400*time.Millisecond, false); len(b.Fences) != 16 || b.Mismatch != 0 {
		t.Fatalf("B with 16 once A left: %+v, want all 16", b)
	}
	if a := own(ss[0], "A", 8, 500*time.Millisecond, false); len(a.Fences) != 0 || a.Mismatch != 16 {
		t.Fatalf("A with 8 back while B holds 16: %+v", a)
	}
	// A dead drainer's expired leases do not hold the count: B dies (no leave), A takes over.
	if a := own(ss[0], "A", 8, 2*time.Second, false); len(a.Fences) != 8 || a.Mismatch != 0 {
		t.Fatalf("A with 8 after B's leases expired: %+v", a)
	}
}

// TestKeyStateReadsTheOwnEnginesRetryState: the status API shows a failed head as retrying
// from KeyState; under the own engine (the default) the retry state lives with the
// ownership state, and KeyState reads it there too (before, such a head showed as queued).
func TestKeyStateReadsTheOwnEnginesRetryState(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	if st, err := s.Depths.KeyState(ctx, "r", "k"); err != nil || st.Retry != nil || st.Held {
		t.Fatalf("a key without state: %+v, %v", st, err)
	}
	want := queue.RetryState{MsgID: "m1", Attempts: 3, LastError: "sink: http 503"}
	if err := s.Ownership.SetOwnRetry(ctx, "r", "k", &want); err != nil {
		t.Fatal(err)
	}
	st, err := s.Depths.KeyState(ctx, "r", "k")
	if err != nil || st.Retry == nil || *st.Retry != want || st.Held {
		t.Fatalf("after the own engine's failed delivery: %+v, %v; want retry %+v", st, err, want)
	}
	if err := s.Ownership.SetOwnRetry(ctx, "r", "k", nil); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Depths.KeyState(ctx, "r", "k"); err != nil || st.Retry != nil {
		t.Fatalf("after the success that follows: %+v, %v", st, err)
	}
}
