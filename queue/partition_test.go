package queue_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// partSchedulers returns n schedulers (n drainer processes) sharing one test prefix whose
// partition count of every rule is *parts (0: the client's default).
func partSchedulers(t *testing.T, n int, parts *atomic.Int64) []*queue.Scheduler {
	t.Helper()
	prefix := redistest.Prefix(t)
	out := make([]*queue.Scheduler, n)
	for i := range out {
		s, err := queue.NewScheduler(testRedis(t), queue.SchedulerConfig{Prefix: prefix,
			Partitions: func(string) int { return int(parts.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

func TestPartitionOfIsFNV1a(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", "merchant-000042", "b.c", "y.*", "日本"} {
		for _, n := range []int{1, 2, 8, 16, 256} {
			h := fnv.New32a()
			h.Write([]byte(key))
			if got, want := queue.PartitionOf(key, n), int(h.Sum32()%uint32(n)); got != want {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d", key, n, got, want)
			}
		}
	}
	if p := queue.DefaultPartitions(redistest.Shared(t).Client(t)); p != 1 {
		t.Errorf("default partitions on a single Redis: %d, want 1", p)
	}
}

// drainSim drives schedulers in virtual time: every step one scheduler (in turn) claims,
// handing back the keys it claimed the step before (so keys stay held across steps, as a
// drainer holds them while it delivers). Each claim of a key with messages left delivers
// one; a key with none is released empty. It fails on a key claimed while held.
type drainSim struct {
	t     *testing.T
	ss    []*queue.Scheduler
	rule  string
	req   queue.ClaimRequest
	left  map[string]int
	sent  map[string]int
	slots map[string][]time.Time
	all   []time.Time // every delivery's slot
	held  map[string]string
	rels  [][]queue.Release
	step  int
}

func newDrainSim(t *testing.T, ss []*queue.Scheduler, rule string, req queue.ClaimRequest) *drainSim {
	return &drainSim{t: t, ss: ss, rule: rule, req: req, left: map[string]int{}, sent: map[string]int{},
		slots: map[string][]time.Time{}, held: map[string]string{}, rels: make([][]queue.Release, len(ss))}
}

// add queues n messages of key at now and marks it due, as the ingress does.
func (d *drainSim) add(now time.Time, key string, n int) {
	d.t.Helper()
	d.left[key] += n
	d.sent[key] += n
	if _, err := d.ss[0].Claims.MarkDueAt(context.Background(), d.rule, now, key); err != nil {
		d.t.Fatal(err)
	}
}

func (d *drainSim) claim(now time.Time) {
	d.t.Helper()
	i := d.step % len(d.ss)
	d.step++
	owner := fmt.Sprintf("d%d", i)
	for _, r := range d.rels[i] {
		delete(d.held, r.Key)
	}
	req := d.req
	req.Owner = owner
	req.Releases = d.rels[i]
	c, err := d.ss[i].Claims.Claim(context.Background(), d.rule, now, req)
	if err != nil {
		d.t.Fatal(err)
	}
	if c.Lost != 0 {
		d.t.Fatalf("%s lost %d releases at %v", owner, c.Lost, now.Sub(t0))
	}
	d.rels[i] = d.rels[i][:0]
	for _, cl := range c.Claims {
		if h, ok := d.held[cl.Key]; ok {
			d.t.Fatalf("key %q claimed by %s at %v while %s holds it", cl.Key, owner, now.Sub(t0), h)
		}
		d.held[cl.Key] = owner
		mode := queue.Emptied
		at := cl.Slot
		if d.left[cl.Key] > 0 {
			d.left[cl.Key]--
			d.slots[cl.Key] = append(d.slots[cl.Key], cl.Slot)
			d.all = append(d.all, cl.Slot)
			mode, at = queue.Released, time.Time{}
		}
		d.rels[i] = append(d.rels[i], queue.Release{Key: cl.Key, Mode: mode, At: at, Fence: cl.Fence})
	}
}

// flush hands back every held key.
func (d *drainSim) flush() {
	d.t.Helper()
	for i, rels := range d.rels {
		if len(rels) == 0 {
			continue
		}
		if _, err := d.ss[i].Claims.Release(context.Background(), d.rule, fmt.Sprintf("d%d", i), d.req.TotalEvery, rels...); err != nil {
			d.t.Fatal(err)
		}
		for _, r := range rels {
			delete(d.held, r.Key)
		}
		d.rels[i] = nil
	}
}

// checkOutflow fails if two deliveries of a key are closer than every, or one was lost.
func (d *drainSim) checkOutflow(every time.Duration) {
	d.t.Helper()
	for k, n := range d.sent {
		if d.left[k] != 0 || len(d.slots[k]) != n {
			d.t.Errorf("key %q: %d of %d messages delivered", k, len(d.slots[k]), n)
		}
		ts := d.slots[k]
		for j := 1; j < len(ts); j++ {
			if gap := ts[j].Sub(ts[j-1]); gap < every {
				d.t.Errorf("key %q: deliveries %d and %d %v apart, outflow allows %v", k, j-1, j, gap, every)
				break
			}
		}
	}
}

// TestOneRuleSpreadsOverEveryMaster: on a 3-master Redis Cluster one rule's 1,000 keys put
// state on every master, and draining them keeps each key's outflow and loses nothing.
func TestOneRuleSpreadsOverEveryMaster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	rdb := c.Client(t)
	prefix := redistest.Prefix(t)
	var ss []*queue.Scheduler
	for range 2 {
		s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	if p := ss[0].Partitions("hot"); p != queue.ClusterPartitions {
		t.Fatalf("partitions of a rule on a cluster: %d, want %d", p, queue.ClusterPartitions)
	}
	every := 100 * time.Millisecond
	d := newDrainSim(t, ss, "hot", queue.ClaimRequest{Outflow: queue.Outflow{Every: every}, Max: 64, Lease: time.Minute})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("merchant-%04d", i)
		d.left[keys[i]], d.sent[keys[i]] = 3, 3
	}
	ctx := context.Background()
	if _, err := ss[0].Claims.MarkDueAt(ctx, "hot", t0, keys...); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := ss[0].Depths.SetDepth(ctx, "hot", k, 3); err != nil {
			t.Fatal(err)
		}
	}
	perMaster := make([]int, len(c.Masters))
	for i, m := range c.Masters {
		ks, err := m.Client(t).Keys(ctx, prefix+"sl:{hot*").Result()
		if err != nil {
			t.Fatal(err)
		}
		perMaster[i] = len(ks)
	}
	t.Logf("rule keys per master: %v", perMaster)
	for i, n := range perMaster {
		if n == 0 {
			t.Errorf("master %d holds none of the rule's state: %v", i, perMaster)
		}
	}
	if due, _, err := ss[0].Claims.Counts(ctx, "hot"); err != nil || due != 1000 {
		t.Fatalf("due keys over the partitions: %d, %v; want 1000", due, err)
	}
	for now := t0; now.Before(t0.Add(time.Second)); now = now.Add(5 * time.Millisecond) {
		d.claim(now)
	}
	d.flush()
	d.checkOutflow(every)
	if due, claimed, err := ss[0].Claims.Counts(ctx, "hot"); err != nil || due != 0 || claimed != 0 {
		t.Errorf("after draining: due %d claimed %d, %v", due, claimed, err)
	}
}

// TestPartitionCountChangeLosesNothing: messages queued under one partition are all
// delivered, none twice, after the rule switches to 8 while keys are held and while new
// messages arrive (marked in their new partitions while their keys still sit in the old).
func TestPartitionCountChangeLosesNothing(t *testing.T) {
	t.Parallel()
	var parts atomic.Int64
	parts.Store(1)
	ss := partSchedulers(t, 2, &parts)
	every := 50 * time.Millisecond
	d := newDrainSim(t, ss, "mig", queue.ClaimRequest{Outflow: queue.Outflow{Every: every}, Max: 16, Lease: time.Minute})
	ctx := context.Background()
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		d.left[keys[i]], d.sent[keys[i]] = 4, 4
	}
	if _, err := ss[0].Claims.MarkDueAt(ctx, "mig", t0, keys...); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, k := range keys {
		if queue.PartitionOf(k, 8) != 0 {
			moved++
		}
	}
	step := 0
	for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(5 * time.Millisecond) {
		switch {
		case step == 20:
			parts.Store(8) // a rules reload, seen by both drainers and the ingress at once
		case step > 20 && step <= 40:
			d.add(now, keys[(step*7)%len(keys)], 1)
		}
		d.claim(now)
		step++
	}
	d.flush()
	d.checkOutflow(every)
	due, claimed, err := ss[0].Claims.Counts(ctx, "mig")
	if err != nil || due != 0 || claimed != 0 {
		t.Errorf("after draining: due %d claimed %d, %v", due, claimed, err)
	}
	// Nothing is left in partition 0 of a key that now lives elsewhere.
	rdb := testRedis(t)
	for _, k := range keys {
		if queue.PartitionOf(k, 8) == 0 {
			continue
		}
		for _, kind := range []string{"due", "lease", "held", "depth", "dirty", "try"} {
			key := ss[0].PartKey("mig", 0, kind)
			if kind == "depth" {
				key = ss[0].PartDepthKey("mig", 0, k)
			}
			var err error
			if kind == "due" || kind == "lease" {
				_, err = rdb.ZScore(ctx, key, k).Result()
			} else {
				_, err = rdb.HGet(ctx, key, k).Result()
			}
			if err == nil {
				t.Errorf("key %q still in its old partition's %s", k, kind)
			} else if err != redis.Nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of %d keys changed partition", moved, len(keys))
}

// TestTotalOutflowAcrossPartitionsUnderSkew measures total_outflow over 8 partitions (and,
// for comparison, 1) under a skewed load: 80 % of the messages on 10 % of the keys, three
// drainers. Goal: within ±1 % over 10 s, never above 1.05× in any 1 s window. Measured
// (2026-11-25): 8 partitions 1,997 (−0.15 %), at most 202 in 1 s (1.010×); 1 partition
// 1,996, at most 201; on the 3-master cluster (8 partitions) 1,997, at most 202.
func TestTotalOutflowAcrossPartitionsUnderSkew(t *testing.T) {
	t.Parallel()
	counts := []int64{1, 8}
	if strings.HasPrefix(t.Name(), onClusterTest) {
		counts = []int64{0} // the cluster's default
	}
	for _, p := range counts {
		t.Run(fmt.Sprintf("partitions=%d", p), func(t *testing.T) {
			t.Parallel()
			skewedTotalOutflow(t, p)
		})
	}
}

func skewedTotalOutflow(t *testing.T, p int64) {
	var parts atomic.Int64
	parts.Store(p)
	ss := partSchedulers(t, 3, &parts)
	of := queue.Outflow{Every: 50 * time.Millisecond, TotalEvery: 5 * time.Millisecond} // 20/s per key, 200/s total
	d := newDrainSim(t, ss, "skew", queue.ClaimRequest{Outflow: of, Max: 16, Lookahead: 10 * time.Millisecond, Lease: time.Minute})
	// 400 messages/s for 10 s (twice total_outflow): 4 of 5 on the 10 hot keys of 100.
	arrival := 0
	step := 2 * time.Millisecond
	end := t0.Add(10 * time.Second)
	for now := t0; now.Before(end.Add(time.Second)); now = now.Add(step) {
		for ; now.Before(end) && !t0.Add(time.Duration(arrival)*2500*time.Microsecond).After(now); arrival++ {
			key := fmt.Sprintf("hot-%d", (arrival/5)%10)
			if arrival%5 == 0 {
				key = fmt.Sprintf("cold-%02d", (arrival/5)%90)
			}
			d.add(now, key, 1)
		}
		d.claim(now)
	}
	d.flush()
	slices.SortFunc(d.all, func(a, b time.Time) int { return a.Compare(b) })
	in10 := 0
	for _, s := range d.all {
		if !s.Before(t0) && s.Before(end) {
			in10++
		}
	}
	worst := 0
	for i, j := 0, 0; i < len(d.all); i++ {
		for j < len(d.all) && d.all[j].Before(d.all[i].Add(time.Second)) {
			j++
		}
		worst = max(worst, j-i)
	}
	t.Logf("total_outflow 200/s over %d partitions, 3 drainers, 80/10 skew: %d in 10 s (%.2f %% off), at most %d in any 1 s window (%.3f×)",
		ss[0].Partitions("skew"), in10, 100*float64(in10-2000)/2000, worst, float64(worst)/200)
	if in10 < 1980 || in10 > 2020 {
		t.Errorf("%d deliveries in 10 s at total_outflow 200/s, want 2000 ± 1 %%", in10)
	}
	if worst > 210 {
		t.Errorf("%d deliveries in one 1 s window at total_outflow 200/s, want ≤ 210", worst)
	}
	for k, ts := range d.slots {
		for j := 1; j < len(ts); j++ {
			if gap := ts[j].Sub(ts[j-1]); gap < of.Every {
				t.Fatalf("key %q: deliveries %v apart, outflow allows %v", k, gap, of.Every)
			}
		}
	}
}

// TestPartitionTagsSpreadOverSlots: the first P partitions of a rule sit in P evenly spaced
// slot ranges, and keySlot agrees with the cluster's own CLUSTER KEYSLOT.
func TestPartitionTagsSpreadOverSlots(t *testing.T) {
	t.Parallel()
	rdb := redistest.SharedCluster(t).Client(t)
	ctx := context.Background()
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"orders", "a", "payments.eu"} {
		slots := make([]int, 8)
		for i := range slots {
			key := s.PartKey(rule, i, "due")
			n, err := rdb.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := queue.KeySlotForTest(key); int64(got) != n {
				t.Fatalf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, n)
			}
			slots[i] = int(n)
		}
		// Relative to partition 0, partition i starts within 64 slots after bitrev14(i):
		// 8 partitions 2,048 apart, one in each eighth of the slot space.
		eighths := map[int]bool{}
		for _, sl := range slots {
			eighths[((sl-slots[0]+16384)%16384)/2048] = true
		}
		if len(eighths) != 8 {
			t.Errorf("rule %q: partitions' slots %v cover %d eighths of the slot space, want 8", rule, slots, len(eighths))
		}
	}
}

// TestPartitionCountShrinkLosesNothing: going from 8 partitions to 2, keys left in partitions
// 2–7 are still claimed (and moved), every message is delivered once, and once those
// partitions are empty the reconciler's step stops claims from visiting them.
func TestPartitionCountShrinkLosesNothing(t *testing.T) {
	t.Parallel()
	var parts atomic.Int64
	parts.Store(8)
	ss := partSchedulers(t, 2, &parts)
	every := 50 * time.Millisecond
	d := newDrainSim(t, ss, "shrink", queue.ClaimRequest{Outflow: queue.Outflow{Every: every}, Max: 16, Lease: time.Minute})
	ctx := context.Background()
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		d.left[keys[i]], d.sent[keys[i]] = 3, 3
	}
	if _, err := ss[0].Claims.MarkDueAt(ctx, "shrink", t0, keys...); err != nil {
		t.Fatal(err)
	}
	step := 0
	for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(5 * time.Millisecond) {
		if step == 10 {
			parts.Store(2)
			if p, n, err := ss[0].ForgetPartitionsForTest(ctx, "shrink"); err != nil || p != 2 || n != 8 {
				t.Fatalf("partitions forgotten while keys are left in them: %d %d %v", p, n, err)
			}
		}
		d.claim(now)
		step++
	}
	d.flush()
	d.checkOutflow(every)
	if p, n, err := ss[0].ForgetPartitionsForTest(ctx, "shrink"); err != nil || p != 2 || n != 2 {
		t.Errorf("after draining: %d partitions, claims visit %d, %v; want 2 and 2", p, n, err)
	}
}

// TestStepInAPartitionKeepsBothMeters: Step of a key outside partition 0 (its slot reserved
// from the rule's meter, which lives in partition 0's slot) obeys the key's outflow and the
// rule's total_outflow, and refuses a stale fence.
func TestStepInAPartitionKeepsBothMeters(t *testing.T) {
	t.Parallel()
	var parts atomic.Int64
	parts.Store(8)
	s := partSchedulers(t, 1, &parts)[0]
	ctx := context.Background()
	var a, b string // two keys outside partition 0
	for i := 0; b == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if p := queue.PartitionOf(k, 8); p != 0 && a == "" {
			a = k
		} else if p != 0 && p != queue.PartitionOf(a, 8) {
			b = k
		}
	}
	of := queue.Outflow{Every: 50 * time.Millisecond, TotalEvery: 40 * time.Millisecond}
	s.Claims.MarkDueAt(ctx, "step", t0, a, b)
	c, err := s.Claims.Claim(ctx, "step", t0, queue.ClaimRequest{Outflow: of, Owner: "A", Max: 2, Lookahead: 100 * time.Millisecond, Lease: time.Minute})
	if err != nil || len(c.Claims) != 2 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	slots := map[string]time.Time{}
	fences := map[string]int64{}
	for _, cl := range c.Claims {
		slots[cl.Key], fences[cl.Key] = cl.Slot, cl.Fence
	}
	// Claimed 40 ms apart (total_outflow), in due order: a's slot t0, b's t0+40ms or the reverse.
	if d := slots[a].Sub(slots[b]).Abs(); d != 40*time.Millisecond {
		t.Fatalf("claimed slots %v apart, want 40ms", d)
	}
	// Each key's next slot is ≥ 50 ms after its last (its outflow), and the two keys' slots stay
	// ≥ 40 ms apart (one meter).
	var all []time.Time
	all = append(all, slots[a], slots[b])
	for range 3 {
		for _, k := range []string{a, b} {
			slot, _, held, err := s.Meter.Step(ctx, "step", "A", k, fences[k], t0, of, time.Minute)
			if err != nil || !held {
				t.Fatalf("step %s: %v %v", k, held, err)
			}
			if want := slots[k].Add(of.Every); slot.Before(want) {
				t.Fatalf("step %s: slot %v, before its outflow allows (%v)", k, slot.Sub(t0), want.Sub(t0))
			}
			slots[k] = slot
			all = append(all, slot)
		}
	}
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	for i := 1; i < len(all); i++ {
		if d := all[i].Sub(all[i-1]); d < of.TotalEvery {
			t.Fatalf("slots %v: two %v apart, total_outflow allows %v", all, d, of.TotalEvery)
		}
	}
	if _, _, held, err := s.Meter.Step(ctx, "step", "A", a, fences[a]-1, t0, of, time.Minute); err != nil || held {
		t.Fatalf("step under a stale fence: held %v, %v", held, err)
	}
}

// TestRenewFindsAKeyInItsOldPartition: a drainer that claimed a key before the rule's
// partition count changed still renews (and then releases) it.
func TestRenewFindsAKeyInItsOldPartition(t *testing.T) {
	t.Parallel()
	var parts atomic.Int64
	parts.Store(1)
	s := partSchedulers(t, 1, &parts)[0]
	ctx := context.Background()
	key := "k1"
	for i := 2; queue.PartitionOf(key, 8) == 0; i++ {
		key = fmt.Sprintf("k%d", i)
	}
	s.Claims.MarkDueAt(ctx, "renew", t0, key)
	c, err := s.Claims.Claim(ctx, "renew", t0, queue.ClaimRequest{Owner: "A", Max: 1, Lease: time.Second})
	if err != nil || len(c.Claims) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	parts.Store(8)
	r, err := s.Claims.Renew(ctx, "renew", "A", t0.Add(500*time.Millisecond), time.Second, []queue.Held{{Key: key, Fence: c.Claims[0].Fence}})
	if err != nil || len(r.Held) != 1 || !r.Held[0] {
		t.Fatalf("renewal after the change: %+v %v", r, err)
	}
	// Renewed to t0+1.5s: not claimable at t0+1.2s (its first lease ended at t0+1s).
	if c2, err := s.Claims.Claim(ctx, "renew", t0.Add(1200*time.Millisecond), queue.ClaimRequest{Owner: "B", Max: 1, Lease: time.Second}); err != nil || len(c2.Claims) != 0 {
		t.Fatalf("claimed by another drainer while renewed: %+v %v", c2, err)
	}
	if _, err := s.Claims.Release(ctx, "renew", "A", 0, queue.Release{Key: key, Mode: queue.Emptied, Fence: c.Claims[0].Fence}); err != nil {
		t.Fatalf("release after the change: %v", err)
	}
}
