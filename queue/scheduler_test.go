package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

var t0 = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)

// newScheduler returns n schedulers with separate Redis clients sharing one test prefix, as
// n drainer processes would.
func newSchedulers(t *testing.T, n int) []*queue.Scheduler {
	t.Helper()
	prefix := redistest.Prefix(t)
	out := make([]*queue.Scheduler, n)
	for i := range out {
		s, err := queue.NewScheduler(testRedis(t), queue.SchedulerConfig{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

func claimKeys(t *testing.T, c queue.Claimed) []string {
	t.Helper()
	var ks []string
	for _, cl := range c.Claims {
		ks = append(ks, cl.Key)
	}
	return ks
}

func TestClaimPacesEachKeyAndLeases(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	ctx := context.Background()
	a, b := ss[0], ss[1]
	every := 100 * time.Millisecond
	req := func(owner string) queue.ClaimRequest {
		return queue.ClaimRequest{Outflow: queue.Outflow{Every: every}, Owner: owner, Max: 10, Lease: time.Minute}
	}
	if n, err := a.Claims.MarkDueAt(ctx, "r", t0, "x", "y.*", "x"); err != nil || n != 2 {
		t.Fatalf("MarkDue: %d, %v", n, err)
	}
	c, err := a.Claims.Claim(ctx, "r", t0, req("A"))
	if err != nil || len(c.Claims) != 2 || !c.Next.IsZero() {
		t.Fatalf("A's claim: %+v, %v", c, err)
	}
	for _, cl := range c.Claims {
		if !cl.Slot.Equal(t0) || !cl.Due.Equal(t0) {
			t.Errorf("claim %+v: want slot and due %v", cl, t0)
		}
	}
	// Claimed keys belong to A until released: B gets nothing, even much later.
	if c, err := b.Claims.Claim(ctx, "r", t0.Add(time.Second), req("B")); err != nil || len(c.Claims) != 0 {
		t.Fatalf("B's claim of leased keys: %v, %v", claimKeys(t, c), err)
	}
	if _, err := a.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "x", Mode: queue.Released}, queue.Release{Key: "y.*", Mode: queue.Released}); err != nil {
		t.Fatal(err)
	}
	// Released keys are due again one outflow interval after their slot, not before.
	if c, _ := b.Claims.Claim(ctx, "r", t0.Add(every-time.Microsecond), req("B")); len(c.Claims) != 0 || !c.Next.Equal(t0.Add(every)) {
		t.Fatalf("claim before the next slot: %v next %v", claimKeys(t, c), c.Next)
	}
	c, _ = b.Claims.Claim(ctx, "r", t0.Add(every), req("B"))
	if len(c.Claims) != 2 || !c.Claims[0].Slot.Equal(t0.Add(every)) {
		t.Fatalf("claim at the next slot: %+v", c)
	}
	// Releasing someone else's claim changes nothing.
	if _, err := a.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "x", Mode: queue.Emptied}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("release by non-holder: %v, want ErrLeaseLost", err)
	}
	if due, claimed, _ := a.Claims.Counts(ctx, "r"); due != 0 || claimed != 2 {
		t.Fatalf("counts: due %d claimed %d", due, claimed)
	}
}

// simulate drives two claimers alternately over [t0, t0+d) in 1 ms steps; every claimed key
// is released at once (delivered), except that each key has msgs[key] messages and is
// released "empty" after them. It returns the slots granted per key.
func simulate(t *testing.T, ss []*queue.Scheduler, rule string, of queue.Outflow, lookahead time.Duration, msgs map[string]int, d time.Duration) map[string][]time.Time {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, 0, len(msgs))
	for k := range msgs {
		keys = append(keys, k)
	}
	if _, err := ss[0].Claims.MarkDueAt(ctx, rule, t0, keys...); err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for k, n := range msgs {
		left[k] = n
	}
	slots := map[string][]time.Time{}
	pending := map[string][]queue.Release{} // d0 hands its releases back with its next claim
	step := 0
	for now := t0; now.Before(t0.Add(d)); now = now.Add(time.Millisecond) {
		step++
		s := ss[step%len(ss)]
		owner := fmt.Sprintf("d%d", step%len(ss))
		c, err := s.Claims.Claim(ctx, rule, now, queue.ClaimRequest{Outflow: of, Owner: owner, Max: 4, Lookahead: lookahead, Lease: time.Minute, Releases: pending[owner]})
		pending[owner] = nil
		if err == nil && c.Lost != 0 {
			t.Fatalf("%d releases lost", c.Lost)
		}
		if err != nil {
			t.Fatal(err)
		}
		var rels []queue.Release
		for _, cl := range c.Claims {
			if cl.Slot.Before(now) || cl.Slot.After(now.Add(lookahead)) {
				t.Fatalf("slot %v outside [now, now+lookahead] at %v", cl.Slot, now)
			}
			mode := queue.Released
			if left[cl.Key] == 0 {
				mode = queue.Emptied
			} else {
				left[cl.Key]--
				slots[cl.Key] = append(slots[cl.Key], cl.Slot)
			}
			rels = append(rels, queue.Release{Key: cl.Key, Mode: mode})
		}
		if owner == "d0" {
			pending[owner] = rels
		} else if _, err := s.Claims.Release(ctx, rule, owner, of.TotalEvery, rels...); err != nil {
			t.Fatal(err)
		}
	}
	return slots
}

func TestClaimKeepsOutflowWithTwoSchedulers(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	every := 50 * time.Millisecond
	msgs := map[string]int{"a": 1000, "b.c": 1000, "": 1000}
	slots := simulate(t, ss, "r", queue.Outflow{Every: every}, 7*time.Millisecond, msgs, 2*time.Second)
	for k, ts := range slots {
		// 2 s at 20/s: exactly 40 slots in [t0, t0+2s), on a 50 ms grid from t0 (claims come
		// up to the lookahead ahead of the slot, so one more slot may be handed out early).
		for len(ts) > 0 && !ts[len(ts)-1].Before(t0.Add(2*time.Second)) {
			ts = ts[:len(ts)-1]
		}
		if len(ts) != 40 {
			t.Errorf("key %q: %d slots in 2s at 20/s, want 40", k, len(ts))
		}
		for i := range ts {
			if want := t0.Add(time.Duration(i) * every); !ts[i].Equal(want) {
				t.Fatalf("key %q slot %d at %v, want %v", k, i, ts[i].Sub(t0), want.Sub(t0))
			}
		}
	}
}

func TestClaimKeepsTotalOutflowFairly(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	of := queue.Outflow{Every: 10 * time.Millisecond, TotalEvery: 25 * time.Millisecond} // 100/s per key, 40/s total
	msgs := map[string]int{}
	for i := 0; i < 8; i++ {
		msgs[fmt.Sprintf("k%d", i)] = 1000
	}
	msgs["short"] = 3 // drains early: its emptied claim gives its total slot back
	slots := simulate(t, ss, "r", of, 0, msgs, 2*time.Second)
	var all []time.Time
	minN, maxN := 1<<30, 0
	for k, ts := range slots {
		all = append(all, ts...)
		if k == "short" {
			if len(ts) != 3 {
				t.Errorf("short key got %d slots, want 3", len(ts))
			}
			continue
		}
		minN, maxN = min(minN, len(ts)), max(maxN, len(ts))
	}
	// 2 s at 40/s = 80 slots (the first at t0).
	if len(all) < 78 || len(all) > 81 {
		t.Errorf("%d slots in 2s at total 40/s, want 80", len(all))
	}
	if maxN-minN > 1 {
		t.Errorf("unfair: keys got between %d and %d slots", minN, maxN)
	}
	// No two slots of the rule closer than the total spacing, except where an emptied claim
	// gave its slot back (at most once per emptied key).
	seen := map[time.Time]int{}
	for _, ts := range all {
		seen[ts]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if dups > 1 {
		t.Errorf("%d slots shared", dups)
	}
}

func TestExpiredLeaseIsHandedOver(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 2)
	ctx := context.Background()
	a, b := ss[0], ss[1]
	req := queue.ClaimRequest{Outflow: queue.Outflow{Every: 100 * time.Millisecond}, Max: 10, Lease: time.Second}
	a.Claims.MarkDueAt(ctx, "r", t0, "k")
	reqA, reqB := req, req
	reqA.Owner, reqB.Owner = "A", "B"
	if c, _ := a.Claims.Claim(ctx, "r", t0, reqA); len(c.Claims) != 1 {
		t.Fatalf("A claims: %+v", c)
	}
	// A "crashes". Until its lease ends (slot + 1 s) the key stays with A.
	if c, _ := b.Claims.Claim(ctx, "r", t0.Add(time.Second-time.Microsecond), reqB); len(c.Claims) != 0 {
		t.Fatalf("B claimed a leased key: %+v", c)
	}
	c, err := b.Claims.Claim(ctx, "r", t0.Add(time.Second), reqB)
	if err != nil || len(c.Claims) != 1 || c.Claims[0].Key != "k" || !c.Claims[0].Due.Equal(t0.Add(100*time.Millisecond)) {
		t.Fatalf("B after A's lease expired: %+v, %v", c, err)
	}
	if _, err := a.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Released}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("A's late release: %v, want ErrLeaseLost", err)
	}
	if held, err := b.Claims.Release(ctx, "r", "B", 0, queue.Release{Key: "k", Mode: queue.Released}); err != nil || !held[0] {
		t.Fatalf("B's release: %v %v", held, err)
	}
}

func TestEmptyKeyRemovalNeverLosesAConcurrentMark(t *testing.T) {
	t.Parallel()
	ss := newSchedulers(t, 1)
	s := ss[0]
	ctx := context.Background()
	req := queue.ClaimRequest{Outflow: queue.Outflow{Every: time.Millisecond}, Owner: "A", Max: 10, Lease: time.Minute}
	due := func(rule string) int64 {
		d, _, err := s.Claims.Counts(ctx, rule)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// 1. Popped empty, no message since: the key leaves the schedule.
	s.Claims.MarkDueAt(ctx, "r1", t0, "k")
	s.Claims.Claim(ctx, "r1", t0, req)
	s.Claims.Release(ctx, "r1", "A", 0, queue.Release{Key: "k", Mode: queue.Emptied})
	if d := due("r1"); d != 0 {
		t.Fatalf("emptied key still due (%d)", d)
	}
	// 2. A message arrives (publish + MarkDue) after the pop saw the key empty but before the
	// drainer removes the key: the key must stay due.
	s.Claims.MarkDueAt(ctx, "r2", t0, "k")
	s.Claims.Claim(ctx, "r2", t0, req)
	if n, _ := s.Claims.MarkDueAt(ctx, "r2", t0, "k"); n != 0 {
		t.Fatalf("MarkDue added a claimed key to the due set (a second drainer could pop it)")
	}
	s.Claims.Release(ctx, "r2", "A", 0, queue.Release{Key: "k", Mode: queue.Emptied})
	if d := due("r2"); d != 1 {
		t.Fatalf("key marked during its claim was dropped (due %d)", d)
	}
	// 3. ... after the removal: MarkDue adds it as usual.
	s.Claims.MarkDueAt(ctx, "r3", t0, "k")
	s.Claims.Claim(ctx, "r3", t0, req)
	s.Claims.Release(ctx, "r3", "A", 0, queue.Release{Key: "k", Mode: queue.Emptied})
	s.Claims.MarkDueAt(ctx, "r3", t0, "k")
	if d := due("r3"); d != 1 {
		t.Fatalf("key marked after its removal is not due")
	}
	// 4. A mark from before the claim does not keep an empty key alive forever.
	s.Claims.MarkDueAt(ctx, "r4", t0, "k")
	s.Claims.MarkDueAt(ctx, "r4", t0, "k")
	s.Claims.Claim(ctx, "r4", t0, req)
	s.Claims.Release(ctx, "r4", "A", 0, queue.Release{Key: "k", Mode: queue.Emptied})
	if d := due("r4"); d != 0 {
		t.Fatalf("stale mark kept an empty key due")
	}
}

func TestRetryStateTravelsWithTheKey(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	req := queue.ClaimRequest{Outflow: queue.Outflow{Every: time.Millisecond}, Owner: "A", Max: 10, Lease: time.Minute}
	s.Claims.MarkDueAt(ctx, "r", t0, "k")
	s.Claims.Claim(ctx, "r", t0, req)
	st := queue.RetryState{MsgID: "m1", Attempts: 2, LastError: "503\nService Unavailable"}
	if _, err := s.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Retrying, At: t0.Add(5 * time.Second), State: st}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Claims.Claim(ctx, "r", t0.Add(5*time.Second-time.Microsecond), req); len(c.Claims) != 0 || !c.Next.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("claimed before the retry time: %+v", c)
	}
	if at, ok, _ := s.Meter.NextSlot(ctx, "r", "k"); !ok || !at.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("NextSlot = %v %v", at, ok)
	}
	c, _ := s.Claims.Claim(ctx, "r", t0.Add(5*time.Second), req)
	if len(c.Claims) != 1 || c.Claims[0].Retry == nil || *c.Claims[0].Retry != st {
		t.Fatalf("claim after retry time: %+v", c)
	}
	s.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Released})
	c, _ = s.Claims.Claim(ctx, "r", t0.Add(6*time.Second), req)
	if len(c.Claims) != 1 || c.Claims[0].Retry != nil {
		t.Fatalf("retry state survived a delivery: %+v", c)
	}
}

func newBenchScheduler(b *testing.B) *queue.Scheduler {
	b.Helper()
	s, err := queue.NewScheduler(redistest.Shared(b).Client(b), queue.SchedulerConfig{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func TestReleaseKeepsDepthCounterAndIdleSlot(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	rdb := testRedis(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	depthKey, idleKey, dueKey := s.KeyOf("r", "k", "depth"), s.KeyOf("r", "k", "idle"), s.KeyOf("r", "k", "due")
	req := queue.ClaimRequest{Outflow: queue.Outflow{Every: time.Second}, Owner: "A", Max: 10, Lease: time.Minute}
	s.Claims.MarkDueAt(ctx, "r", t0, "k")
	if err := s.Depths.SetDepth(ctx, "r", "k", 2); err != nil {
		t.Fatal(err)
	}
	// A delivery counts one message out of the ingress's depth counter; a retry does not.
	c, _ := s.Claims.Claim(ctx, "r", t0, req)
	s.Claims.Claim(ctx, "r", t0, queue.ClaimRequest{Owner: "A", Releases: []queue.Release{{Key: "k", Mode: queue.Retrying, At: t0.Add(time.Second)}}})
	if d, _ := rdb.HGet(ctx, depthKey, "k").Int(); d != 2 {
		t.Fatalf("depth after a retry %d, want 2", d)
	}
	c, _ = s.Claims.Claim(ctx, "r", t0.Add(time.Second), req)
	s.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Released})
	if d, _ := rdb.HGet(ctx, depthKey, "k").Int(); d != 1 {
		t.Fatalf("depth after a delivery %d, want 1", d)
	}
	// Found empty: the counter forgets the key, and its unused slot stays in `idle`, so a
	// message marked by an ingress whose clock is behind is not due before that slot.
	c, _ = s.Claims.Claim(ctx, "r", t0.Add(2*time.Second), req)
	slot := c.Claims[0].Slot
	s.Claims.Release(ctx, "r", "A", 0, queue.Release{Key: "k", Mode: queue.Emptied, At: slot})
	if n, _ := rdb.HExists(ctx, depthKey, "k").Result(); n {
		t.Fatal("depth of an emptied key kept")
	}
	if sc, err := rdb.ZScore(ctx, idleKey, "k").Result(); err != nil || int64(sc) != slot.UnixMicro() {
		t.Fatalf("idle slot %v, %v; want %v", sc, err, slot.UnixMicro())
	}
	s.Claims.MarkDueAt(ctx, "r", slot.Add(-time.Millisecond), "k")
	if sc, _ := rdb.ZScore(ctx, dueKey, "k").Result(); int64(sc) != slot.UnixMicro() {
		t.Fatalf("due at %v, want the unused slot %v", int64(sc), slot.UnixMicro())
	}
}
