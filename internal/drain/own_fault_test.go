package drain_test

// The own engine's counterparts of the claim engine's lease and fault tests (lease_test.go,
// fault_test.go, drain_test.go's hung drainer): the same properties, asked of partitions
// owned through leases instead of keys claimed one by one.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// callSink records every call (key, id, fence, start, whether its context ended before it
// answered). hang decides, per call, whether the call ignores everything until release is
// closed (a stuck sink) or waits for its context (a sink that honours it); nil: answer 200.
type callSink struct {
	mu      sync.Mutex
	calls   []ownDelivery
	hang    func(m queue.Message, n int) (stuck, waitCtx bool) // n: calls so far of m.ID
	per     map[string]int
	release chan struct{}
	entered chan ownDelivery // the first call that hangs or waits
}

func newCallSink(hang func(m queue.Message, n int) (bool, bool)) *callSink {
	return &callSink{hang: hang, per: map[string]int{}, release: make(chan struct{}), entered: make(chan ownDelivery, 1)}
}

func (s *callSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	f := ownDelivery{key: m.Key, id: m.ID, fence: m.Fence, start: time.Now()}
	s.mu.Lock()
	s.per[m.ID]++
	n := s.per[m.ID]
	s.mu.Unlock()
	var stuck, waitCtx bool
	if s.hang != nil {
		stuck, waitCtx = s.hang(m, n)
	}
	if stuck || waitCtx {
		select {
		case s.entered <- f:
		default:
		}
	}
	out := drain.OutcomeDelivered()
	switch {
	case stuck:
		<-s.release // ignores its context
	case waitCtx:
		select {
		case <-ctx.Done():
			f.cancelled = true
			out = drain.OutcomeRetry(0, "cancelled")
		case <-s.release:
		}
	}
	f.end = time.Now()
	s.mu.Lock()
	s.calls = append(s.calls, f)
	s.mu.Unlock()
	return out
}

func (s *callSink) snapshot() []ownDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// accepted is the ids of the calls of key that were not cancelled, in order.
func (s *callSink) accepted(key string) []string {
	var ids []string
	for _, c := range s.snapshot() {
		if c.key == key && !c.cancelled {
			ids = append(ids, c.id)
		}
	}
	return ids
}

// checkFencesGrow fails when a key's Sluice-Fence went backwards between two calls (in the
// order they reached the sink).
func checkFencesGrow(t *testing.T, calls []ownDelivery) {
	t.Helper()
	slices.SortStableFunc(calls, func(a, b ownDelivery) int { return a.start.Compare(b.start) })
	last := map[string]int64{}
	for _, c := range calls {
		if c.fence == 0 {
			t.Errorf("a delivery of %s without Sluice-Fence", c.key)
		}
		if c.fence < last[c.key] {
			t.Errorf("key %s: Sluice-Fence went backwards %d -> %d", c.key, last[c.key], c.fence)
		}
		last[c.key] = max(last[c.key], c.fence)
	}
}

func ownBase(e *env, rule string) string { return e.prefix + "sl:{" + queue.RuleToken(rule) + ".own}:" }

// TestOwnEngineLostLeaseStopsTheOldOwner is TestLostLeaseIsFencedAtTheSink for the own
// engine: drainer A owns every partition and its delivery of key k hangs at the sink; k's
// partition lease is taken from A in Redis (another owner X, with a newer fence, as a
// drainer that took an expired lease would). A's next renewal (every 500 ms here; its lease
// lasts 6 s, so only the renewal can explain a quick stop) finds the partition gone: the
// delivery in flight is cancelled and A delivers nothing of k while X holds it. Once X's
// lease is removed A owns the partition again under a newer fence still and k's messages go
// out, each once and in order, and the Sluice-Fence the sink sees for k never goes backwards.
func TestOwnEngineLostLeaseStopsTheOldOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("own-lost", 1000, 0, func(r *rules.Rule) { r.Sink.Timeout = 30 * time.Second })
	var want []string
	for i := range 5 {
		want = append(want, e.enqueue(r, "k", fmt.Sprintf(`{"i":%d}`, i)).ID)
	}
	sink := newCallSink(func(m queue.Message, n int) (bool, bool) { return false, m.Key == "k" && m.ID == want[0] && n == 1 })
	t.Cleanup(func() { close(sink.release) }) // before the drainer's Stop
	const renew = 500 * time.Millisecond
	a := e.drainer(context.Background(), sink, func(c *drain.Config) {
		ownEngine(c)
		c.Owner = "A"
		c.OwnLease, c.OwnRenew = 6*time.Second, renew
	})
	var first ownDelivery
	select {
	case first = <-sink.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("A's delivery of k never reached the sink")
	}
	ctx := context.Background()
	base := ownBase(e, r.Name)
	p := queue.OwnPartitionOf("k", queue.DefaultOwnPartitions)
	fX, err := e.rdb.Incr(ctx, base+"fence").Result()
	if err != nil {
		t.Fatal(err)
	}
	lease := fmt.Sprintf("X %d %d", fX, time.Now().Add(time.Hour).UnixMicro())
	if err := e.rdb.HSet(ctx, base+"leases", strconv.Itoa(p), lease).Err(); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	var cancelAt time.Time
	waittest.Eventually(t, 10*time.Second, "A's delivery of k cancelled", func() bool {
		for _, c := range sink.snapshot() {
			if c.cancelled {
				cancelAt = c.end
				return true
			}
		}
		return false
	})
	t.Logf("A's fence %d, X's %d; A's delivery cancelled %v after the lease was taken", first.fence, fX, cancelAt.Sub(taken).Round(time.Millisecond))
	if d := cancelAt.Sub(taken); d > 2*time.Second {
		t.Errorf("A stopped delivering %v after losing the lease, want at its next renewal (every %v; the lease itself lasts 6 s)", d, renew)
	}
	// X holds k's partition through three more renewals of A: nothing of k may start now.
	sigA := drain.SignalsOf(a)
	sigA.Wait(t, 10*time.Second, drain.Renewed, sigA.Count(drain.RenewSent)+3)
	if err := e.rdb.HDel(ctx, base+"leases", strconv.Itoa(p)).Err(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waittest.Eventually(t, 20*time.Second, "k's messages delivered after X's lease is gone", func() bool { return len(sink.accepted("k")) == len(want) })
	waittest.Eventually(t, 10*time.Second, "empty queue", func() bool { return e.depth(r) == 0 })
	calls := sink.snapshot()
	for _, c := range calls {
		if c.start.After(cancelAt) && c.start.Before(freed) {
			t.Errorf("k delivered at %v, while X held its partition (cancelled at %v, freed at %v)", c.start.Sub(taken), cancelAt.Sub(taken), freed.Sub(taken))
		}
		if !c.cancelled && c.fence <= fX {
			t.Errorf("k's message %s accepted under fence %d, not after X's %d", c.id, c.fence, fX)
		}
	}
	if got := sink.accepted("k"); !slices.Equal(got, want) {
		t.Errorf("accepted %v, want each message once in order %v", got, want)
	}
	checkFencesGrow(t, calls)
}

// TestOwnEngineRedisOutageStopsByTheLeaseAndResumes is TestRedisOutagePausesAndReconcileRepairs
// for the own engine: while Redis is down the drainer cannot renew, so it stops delivering
// by its lease's deadline (the renewal sent last + lease − margin, before any other drainer
// could own its partitions); messages admitted meanwhile (one JetStream publish, no Redis)
// and those left over are delivered once Redis is back (empty: no persistence), nothing is
// lost, every key keeps its outflow, and Sluice-Fence never goes backwards (the fencing
// counter restarts from Redis's clock).
func TestOwnEngineRedisOutageStopsByTheLeaseAndResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := redistest.Start(t, redistest.Options{TCP: true})
	opts := srv.Options()
	opts.MaxRetries = -1
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	const rate = 10
	r := e.rule("own-outage", rate, 0, nil)
	keys := keyNames(8)
	e.publish(r, keys, 30) // 3 s of traffic per key
	sink := newCallSink(nil)
	reg := prometheus.NewRegistry()
	const lease = 1500 * time.Millisecond
	e.drainer(context.Background(), sink, func(c *drain.Config) {
		ownEngine(c)
		c.Scheduler, c.Registerer = s, reg
		c.RedisBackoff = 20 * time.Millisecond
		c.OwnLease = lease
		c.Logger = slog.New(slog.DiscardHandler)
	})
	waittest.Eventually(t, 20*time.Second, "deliveries under way", func() bool { return len(sink.snapshot()) >= 20 })
	srv.Stop()
	down := time.Now()
	e.publish(r, keys, 5) // admitted during the outage: JetStream only
	waittest.Eventually(t, 20*time.Second, "the leases to lapse", func() bool {
		return counterValue(t, reg, "sluice_claims_lost_total", r.Name) >= 1
	})
	lapsed := time.Now()
	time.Sleep(lease / 2) // the scenario: Redis stays down a while after the lapse, and nothing may go out now
	up := time.Now()      // Redis may answer before Restart returns
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 60*time.Second, "every message delivered after Redis came back", func() bool {
		return e.depth(r) == 0 && len(sink.snapshot()) >= len(keys)*35
	})
	calls := sink.snapshot()
	var last time.Time
	byKey := map[string][]time.Time{}
	seen := map[string]int{}
	for _, c := range calls {
		seen[c.id]++
		byKey[c.key] = append(byKey[c.key], c.start)
		if c.start.After(down) && c.start.Before(up) {
			last = maxT(last, c.start)
		}
	}
	t.Logf("Redis down at 0: last delivery started at %v, leases lapsed by %v, Redis back at %v; %d deliveries of %d messages",
		last.Sub(down).Round(time.Millisecond), lapsed.Sub(down).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond), len(calls), len(seen))
	if !last.IsZero() && last.Sub(down) >= lease {
		t.Errorf("a delivery started %v after Redis went down, after the lease (%v) could have ended", last.Sub(down), lease)
	}
	if len(seen) != len(keys)*35 {
		t.Errorf("%d distinct messages delivered, want %d", len(seen), len(keys)*35)
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
	for k, ts := range byKey {
		if n := maxInWindow(ts, time.Second); n > rate+1 {
			t.Errorf("key %s: %d deliveries in 1 s, want ≤ rate + 1 = %d", k, n, rate+1)
		}
	}
	checkFencesGrow(t, calls)
}

// TestOwnEngineSinkIgnoringItsDeadlineIsAbandoned is TestSinkIgnoringItsDeadlineIsAbandoned
// for the own engine: a sink call that ignores its context would hold the rule's only
// worker for ever. Once it outlives sink.timeout + OwnRenew (100 + 500 ms here), the rule's
// sweep (at most every 100 ms, from the pacer, which looks at least every 200 ms while its
// workers are busy) counts it lost and gives the rule a new worker: the other key goes out
// within that bound, and the stuck key's head is delivered again (it was not deleted).
func TestOwnEngineSinkIgnoringItsDeadlineIsAbandoned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const timeout = 100 * time.Millisecond
	r := e.rule("own-abandon", 1000, 0, func(r *rules.Rule) { r.Sink.Timeout = timeout })
	stuck := e.enqueue(r, "stuck", `"stuck"`)
	sink := newCallSink(func(m queue.Message, n int) (bool, bool) { return m.Key == "stuck" && n == 1, false })
	reg := prometheus.NewRegistry()
	const renew = 500 * time.Millisecond // OwnLease 1.5 s / 3
	e.drainer(context.Background(), sink, func(c *drain.Config) {
		ownEngine(c)
		c.Registerer = reg
		c.Workers = 1
	})
	t.Cleanup(func() { close(sink.release) }) // before the drainer's Stop
	var since time.Time
	select {
	case f := <-sink.entered:
		since = f.start
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck delivery never reached the sink")
	}
	e.enqueue(r, "ok", `"ok"`)
	waittest.Eventually(t, 20*time.Second, "the other key's delivery and the stuck key's second", func() bool {
		return len(sink.accepted("ok")) == 1 && len(sink.accepted("stuck")) == 1
	})
	var at time.Time
	for _, c := range sink.snapshot() {
		if c.key == "ok" {
			at = c.start
		}
	}
	limit := timeout + renew
	bound := limit + 200*time.Millisecond
	w := at.Sub(since)
	t.Logf("the other key went out %v after the stuck delivery started (abandoned at %v, bound %v)", w.Round(time.Millisecond), limit, bound)
	// The delivery's clock starts at its dispatch, a pop before the sink saw it.
	if w < limit-50*time.Millisecond {
		t.Errorf("the other key went out after %v, before the stuck delivery was abandoned (%v)", w, limit)
	}
	if w > bound+time.Second { // a second for the scheduling of a loaded machine
		t.Errorf("the other key went out after %v, want within %v", w, bound)
	}
	if got := sink.accepted("stuck"); len(got) != 1 || got[0] != stuck.ID {
		t.Errorf("the stuck key's accepted deliveries %v, want its head %s again", got, stuck.ID)
	}
	if got := counterValue(t, reg, "sluice_claims_lost_total", r.Name); got < 1 {
		t.Errorf("sluice_claims_lost_total = %v, want the abandoned delivery counted", got)
	}
}

// TestOwnEngineHungDeliveryIsRetriedByItsOwner is TestHungDrainerIsReplacedAfterItsLease for
// the own engine, where a drainer whose sink hangs still renews its leases and so keeps
// its partitions: two drainers share a rule; A's delivery of a key of its own hangs (the
// sink ignores its context). A abandons it after sink.timeout + OwnRenew and delivers the
// key's head again itself, then the next message; B never delivers the key, and the
// partition stays A's throughout.
func TestOwnEngineHungDeliveryIsRetriedByItsOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("own-hung", 1000, 0, func(r *rules.Rule) { r.Sink.Timeout = 100 * time.Millisecond })
	sinkA := newCallSink(func(m queue.Message, n int) (bool, bool) { return n == 1 && string(m.Payload) == `"x"`, false })
	sinkB := newCallSink(nil)
	e.drainer(context.Background(), sinkA, func(c *drain.Config) { ownEngine(c); c.Owner = "A"; c.Workers = 1 })
	t.Cleanup(func() { close(sinkA.release) }) // before the drainer's Stop
	e.drainer(context.Background(), sinkB, func(c *drain.Config) { ownEngine(c); c.Owner = "B" })
	var mine map[int]bool
	waittest.Eventually(t, 20*time.Second, "A and B owning 8 partitions each", func() bool {
		mine = map[int]bool{}
		n := map[string]int{}
		for p, l := range ownLeases(t, e, r.Name) {
			n[l.owner]++
			if l.owner == "A" {
				mine[p] = true
			}
		}
		return n["A"] == 8 && n["B"] == 8
	})
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); mine[queue.OwnPartitionOf(k, queue.DefaultOwnPartitions)] {
			key = k
		}
	}
	m := e.enqueue(r, key, `"x"`)
	y := e.enqueue(r, key, `"y"`)
	var since time.Time
	select {
	case f := <-sinkA.entered:
		since = f.start
	case <-time.After(20 * time.Second):
		t.Fatal("A's delivery never reached the sink")
	}
	waittest.Eventually(t, 20*time.Second, "the head again and the next message", func() bool { return len(sinkA.accepted(key)) == 2 })
	got := sinkA.accepted(key)
	if got[0] != m.ID || got[1] != y.ID {
		t.Fatalf("A delivered %v, want %s again then %s", got, m.ID, y.ID)
	}
	var again time.Time
	for _, c := range sinkA.snapshot() {
		if c.id == m.ID && c.start.After(since) {
			again = c.start
			break
		}
	}
	t.Logf("A delivered the hung head again %v after the hung call started", again.Sub(since).Round(time.Millisecond))
	if w := again.Sub(since); w < 550*time.Millisecond {
		t.Errorf("the head was delivered again after %v, before the hung delivery was abandoned (600 ms)", w)
	}
	if n := len(sinkB.accepted(key)); n != 0 {
		t.Errorf("B delivered %s %d times: A's partition moved while A was alive and renewing", key, n)
	}
	if l := ownLeases(t, e, r.Name)[queue.OwnPartitionOf(key, queue.DefaultOwnPartitions)]; l.owner != "A" {
		t.Errorf("the key's partition is now %q's, want still A's", l.owner)
	}
}

// TestOwnEngineSinkMaxInFlightBelowTheDrainers: sink.max_in_flight 1 with two own drainers
// (8 workers each, 20 keys spread over both): the cap holds over the rule — never 2
// deliveries at the sink at once — through the Redis slots the engine takes only for a cap
// below its live drainers; every message is delivered once and every slot given back. (In
// memory the cap would be split 1 + 0, and each drainer delivers at least one at a time.)
func TestOwnEngineSinkMaxInFlightBelowTheDrainers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("capped-one", 10, 0, func(r *rules.Rule) { r.Sink.MaxInFlight = 1; r.Sink.Timeout = 5 * time.Second })
	sink := &slowSink{took: 100 * time.Millisecond, now: map[string]int{}, most: map[string]int{}, at: map[string][]time.Time{}, ids: map[string]int{}}
	for _, name := range []string{"A", "B"} {
		e.drainer(context.Background(), sink, func(c *drain.Config) { ownEngine(c); c.Owner = name; c.Workers = 8 })
	}
	waittest.Eventually(t, 20*time.Second, "A and B owning 8 partitions each", func() bool {
		n := map[string]int{}
		for _, l := range ownLeases(t, e, r.Name) {
			n[l.owner]++
		}
		return n["A"] == 8 && n["B"] == 8
	})
	const keys = 20
	owners := map[string]int{}
	leases := ownLeases(t, e, r.Name)
	for k := range keys {
		key := fmt.Sprint("c", k)
		owners[leases[queue.OwnPartitionOf(key, queue.DefaultOwnPartitions)].owner]++
		e.enqueue(r, key, "1")
	}
	if owners["A"] == 0 || owners["B"] == 0 {
		t.Fatalf("keys per owner %v: both drainers must have keys", owners)
	}
	waittest.Eventually(t, 30*time.Second, "every message delivered", func() bool { s, _ := sink.snapshot(r.Name); return len(s) >= keys })
	starts, most := sink.snapshot(r.Name)
	took := starts[len(starts)-1].Sub(starts[0])
	t.Logf("keys per drainer %v; %d deliveries in %v, at most %d at once", owners, len(starts), took, most)
	if most > 1 {
		t.Errorf("%d deliveries at the sink at once, want at most sink.max_in_flight = 1", most)
	}
	if took < (keys-1)*100*time.Millisecond*9/10 {
		t.Errorf("%d deliveries of 100 ms started within %v: more than one at a time", keys, took)
	}
	waittest.Eventually(t, 5*time.Second, "every slot given back", func() bool {
		n, err := e.s.SinkSlots.InFlight(context.Background(), r.Name)
		return err == nil && n == 0
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, n := range sink.ids {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
}

// gaugeValue reads a gauge of one rule from reg (-1 when absent).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name, rule string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rule" && l.GetValue() == rule {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestOwnEngineOwnPartitionsDisagreementIsDetected: drainer A runs with 16 ownership
// partitions, B is started with 32 (a changed -own-partitions rolled out to one drainer).
// Owning partitions under both counts would give some keys two owners; instead B owns none
// and says so (sluice_ownership_partitions_mismatch 1, an error log), A owns all 16 and
// delivers everything once. Once A stops, B owns the rule's keys under 32 partitions.
func TestOwnEngineOwnPartitionsDisagreementIsDetected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("own-parts", 1000, 0, nil)
	sinkA, sinkB := newCallSink(nil), newCallSink(nil)
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	logB := &syncBuffer{}
	a := e.drainer(context.Background(), sinkA, func(c *drain.Config) { ownEngine(c); c.Owner = "A"; c.Registerer = regA })
	waittest.Eventually(t, 20*time.Second, "A owning 16 partitions", func() bool { return gaugeValue(t, regA, "sluice_partitions_owned", r.Name) == 16 })
	e.drainer(context.Background(), sinkB, func(c *drain.Config) {
		ownEngine(c)
		c.Owner, c.Registerer, c.OwnPartitions = "B", regB, 32
		c.Logger = slog.New(slog.NewTextHandler(logB, nil))
	})
	waittest.Eventually(t, 20*time.Second, "B reporting the disagreement", func() bool {
		return gaugeValue(t, regB, "sluice_ownership_partitions_mismatch", r.Name) == 1
	})
	keys := keyNames(40)
	e.publish(r, keys, 3)
	waittest.Eventually(t, 30*time.Second, "every message delivered", func() bool { return len(sinkA.snapshot())+len(sinkB.snapshot()) >= len(keys)*3 })
	if n := len(sinkB.snapshot()); n != 0 {
		t.Errorf("B (32 partitions) delivered %d messages while A held the rule's leases under 16", n)
	}
	if got := gaugeValue(t, regA, "sluice_partitions_owned", r.Name); got != 16 {
		t.Errorf("A owns %v partitions, want all 16 (B is not counted)", got)
	}
	if !strings.Contains(logB.String(), "-own-partitions differs") {
		t.Errorf("B did not log the disagreement:\n%s", logB.String())
	}
	a.Stop() // A gives its partitions up: B's count is taken
	waittest.Eventually(t, 20*time.Second, "B owning 32 partitions", func() bool {
		return gaugeValue(t, regB, "sluice_partitions_owned", r.Name) == 32 && gaugeValue(t, regB, "sluice_ownership_partitions_mismatch", r.Name) == 0
	})
	e.publish(r, keys, 1)
	waittest.Eventually(t, 30*time.Second, "the later messages delivered by B", func() bool { return len(sinkB.snapshot()) >= len(keys) })
	seen := map[string]int{}
	for _, c := range append(sinkA.snapshot(), sinkB.snapshot()...) {
		seen[c.id]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
	if len(seen) != len(keys)*4 {
		t.Errorf("%d messages delivered, want %d", len(seen), len(keys)*4)
	}
}
