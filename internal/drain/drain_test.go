package drain_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// env is one test's private JetStream server, Redis prefix and queue rules.
type env struct {
	t     *testing.T
	js    jetstream.JetStream
	q     *queue.Queues
	s     *queue.Scheduler
	rules []*rules.Rule
	mu    sync.Mutex
	// prefix and rdb are the scheduler's Redis key prefix and client (for tests that
	// reach into Redis, or give another drainer a client of its own).
	prefix string
	rdb    *redis.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prefix, rdb := redistest.Prefix(t), redistest.Shared(t).Client(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, js: js, q: q, s: s, prefix: prefix, rdb: rdb}
}

// rule adds a queue rule with capacity 1000 and the given per-key outflow (per second).
func (e *env) rule(name string, outflow, total int64, mut func(*rules.Rule)) *rules.Rule {
	e.t.Helper()
	r := &rules.Rule{
		Name:     name,
		Queue:    &rules.Queue{Capacity: 1000, Outflow: rules.Rate{Requests: outflow, Interval: time.Second}},
		Sink:     rules.Sink{URL: "http://test.invalid", Timeout: time.Second},
		Delivery: rules.Delivery{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond},
		Ordering: rules.OrderingStrict,
	}
	if total > 0 {
		r.Queue.TotalOutflow = rules.Rate{Requests: total, Interval: time.Second}
	}
	if mut != nil {
		mut(r)
	}
	if err := e.q.Ensure(context.Background(), r.Name, r.Queue.Capacity); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.rules = append(e.rules, r)
	e.mu.Unlock()
	return r
}

func (e *env) currentRules() []*rules.Rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.rules)
}

// enqueue does what the ingress does: publish, then mark the key due.
func (e *env) enqueue(r *rules.Rule, key, payload string) queue.Message {
	e.t.Helper()
	m := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Rule: r.Name, Key: key, Payload: []byte(payload), CreatedAt: time.Now()}
	if _, err := e.q.Enqueue(context.Background(), r.Name, m); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Claims.MarkDue(context.Background(), r.Name, key); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// drainer starts a drainer on the env; it is stopped when the test ends.
func (e *env) drainer(ctx context.Context, sink drain.Sink, mut func(*drain.Config)) *drain.Drainer {
	e.t.Helper()
	cfg := drain.Config{
		Queues: e.q, Scheduler: e.s, Rules: e.currentRules, Sink: sink,
		Workers: 8, RulesEvery: 50 * time.Millisecond, ReconcileEvery: -1, StopTimeout: 5 * time.Second,
		Logger: testLogger(e.t), Engine: os.Getenv("SLUICE_TEST_ENGINE"),
	}
	if mut != nil {
		mut(&cfg)
	}
	d, err := drain.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	drain.InstallSignals(d) // drain.SignalsOf(d): what a test waits on instead of sleeping
	if err := d.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Stop)
	return d
}

// delivery is one call of a recording sink.
type delivery struct {
	ID, Key, Payload string
	Attempt          int
	At               time.Time
}

// recSink records every delivery and answers with fn (nil: delivered).
type recSink struct {
	mu  sync.Mutex
	got []delivery
	fn  func(ctx context.Context, m queue.Message, n int) drain.Outcome // n: calls so far for m.ID
	per map[string]int
}

func (s *recSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	s.mu.Lock()
	if s.per == nil {
		s.per = map[string]int{}
	}
	s.per[m.ID]++
	n := s.per[m.ID]
	s.got = append(s.got, delivery{ID: m.ID, Key: m.Key, Payload: string(m.Payload), Attempt: m.Attempt + 1, At: time.Now()})
	fn := s.fn
	s.mu.Unlock()
	if fn != nil {
		return fn(ctx, m, n)
	}
	return drain.OutcomeDelivered()
}

func (s *recSink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *recSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (e *env) depth(r *rules.Rule) uint64 {
	st, err := e.q.Stats(context.Background(), r.Name)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Msgs
}

func TestDeliversEveryKeyInOrderAndDeletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("orders", 1000, 0, nil)
	keys := []string{"a", "a.b", "*", ">", " ", "🦀", ""}
	want := map[string][]string{}
	for i := 0; i < 5; i++ {
		for _, k := range keys {
			m := e.enqueue(r, k, fmt.Sprintf(`{"k":%q,"i":%d}`, k, i))
			want[k] = append(want[k], m.ID)
		}
	}
	reg := prometheus.NewRegistry()
	sink := &recSink{}
	e.drainer(context.Background(), sink, func(c *drain.Config) { c.Registerer = reg })
	waittest.Eventually(t, 20*time.Second, "35 deliveries", func() bool { return sink.count() >= 35 })
	waittest.Eventually(t, 10*time.Second, "empty queue", func() bool { return e.depth(r) == 0 })
	got := map[string][]string{}
	for _, d := range sink.deliveries() {
		got[d.Key] = append(got[d.Key], d.ID)
		if d.Attempt != 1 {
			t.Errorf("message %s delivered as attempt %d", d.ID, d.Attempt)
		}
	}
	for _, k := range keys {
		if !slices.Equal(got[k], want[k]) {
			t.Errorf("key %q: delivered %v, want %v", k, got[k], want[k])
		}
	}
	// The counter is incremented after the delete that emptied the queue: wait for it.
	waittest.Eventually(t, 5*time.Second, "sluice_deliveries_total 35", func() bool {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_deliveries_total" && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetCounter().GetValue() >= 35
			}
		}
		return false
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() { // never a key
				case "rule", "outcome", "class", "kind":
				default:
					t.Errorf("metric %s has label %s", mf.GetName(), l.GetName())
				}
			}
			if mf.GetName() == "sluice_deliveries_total" && m.GetCounter().GetValue() != 35 {
				t.Errorf("sluice_deliveries_total = %v, want 35", m.GetCounter().GetValue())
			}
			if mf.GetName() == "sluice_dispatch_lag_seconds" && m.GetHistogram().GetSampleCount() < 35 {
				t.Errorf("lag histogram has %d samples", m.GetHistogram().GetSampleCount())
			}
			// 35 messages, each accepted at its first attempt by a sink that answers 2xx.
			if mf.GetName() == "sluice_time_in_queue_seconds" && m.GetHistogram().GetSampleCount() != 35 {
				t.Errorf("time in queue histogram has %d samples, want 35", m.GetHistogram().GetSampleCount())
			}
			if mf.GetName() == "sluice_delivery_attempts" {
				if h := m.GetHistogram(); h.GetSampleCount() != 35 || h.GetSampleSum() != 35 {
					t.Errorf("attempts histogram: %d samples summing to %v, want 35 of 1 attempt", h.GetSampleCount(), h.GetSampleSum())
				}
			}
			if mf.GetName() == "sluice_sink_responses_total" {
				if len(m.GetLabel()) != 2 || m.GetLabel()[0].GetValue() != "2xx" || m.GetCounter().GetValue() != 35 {
					t.Errorf("sink responses %v = %v, want class 2xx = 35", m.GetLabel(), m.GetCounter().GetValue())
				}
			}
			if mf.GetName() == "sluice_drainer_running" && m.GetGauge().GetValue() != 1 {
				t.Errorf("sluice_drainer_running = %v, want 1", m.GetGauge().GetValue())
			}
		}
	}
	for _, name := range []string{"sluice_deliveries_total", "sluice_dispatch_lag_seconds", "sluice_outflow_rate",
		"sluice_time_in_queue_seconds", "sluice_delivery_attempts", "sluice_sink_responses_total", "sluice_drainer_running"} {
		if !seen[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
}

// maxInWindow is the largest number of times within any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func TestTwoDrainersKeepKeyAndTotalOutflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	perKey := e.rule("per-key", 20, 0, nil) // one key at 20/s
	total := e.rule("total", 100, 20, nil)  // 5 keys at 100/s each, 20/s for the rule
	for i := 0; i < 80; i++ {
		e.enqueue(perKey, "k", "{}")
	}
	for i := 0; i < 24; i++ {
		for k := 0; k < 5; k++ {
			e.enqueue(total, fmt.Sprintf("t%d", k), "{}")
		}
	}
	sink := &recSink{}
	for i := 0; i < 2; i++ {
		e.drainer(context.Background(), sink, nil)
	}
	waittest.Eventually(t, 30*time.Second, "3.5 s of deliveries", func() bool {
		ds := sink.deliveries()
		return len(ds) > 0 && time.Since(ds[0].At) > 3500*time.Millisecond
	})
	var keyTimes, totalTimes []time.Time
	perTotalKey := map[string]int{}
	ds := sink.deliveries()
	// Fairness is counted from 1 s after the first delivery: two drainers started together
	// normally split the partitions at once, but on a loaded machine the second one's first
	// renewal can come late and take its partitions over from the first, and the keys moved
	// then wait out one handover (a start-up cost, not the share).
	from, to := ds[0].At.Add(time.Second), ds[0].At.Add(3500*time.Millisecond)
	for _, d := range ds {
		if d.Key == "k" {
			keyTimes = append(keyTimes, d.At)
		} else {
			totalTimes = append(totalTimes, d.At)
			if !d.At.Before(from) && d.At.Before(to) {
				perTotalKey[d.Key]++
			}
		}
	}
	// Slots are exact in Redis; the sink sees them with scheduling jitter, so a window of 1 s
	// may catch one or two extra deliveries at its edges, never a burst.
	if n := maxInWindow(keyTimes, time.Second); n > 22 {
		t.Errorf("key at 20/s: %d deliveries within one second", n)
	}
	if n := maxInWindow(totalTimes, time.Second); n > 22 {
		t.Errorf("rule at total 20/s: %d deliveries within one second", n)
	}
	// And it does drain: at least half the configured rate even on a loaded machine.
	if len(keyTimes) < 35 || len(totalTimes) < 35 {
		t.Errorf("too slow: %d and %d deliveries in ~3.5 s at 20/s", len(keyTimes), len(totalTimes))
	}
	lo, hi := 1<<30, 0
	for _, n := range perTotalKey {
		lo, hi = min(lo, n), max(hi, n)
	}
	if len(perTotalKey) != 5 || hi-lo > 2 {
		t.Errorf("total_outflow not shared fairly: %v", perTotalKey)
	}
	t.Logf("per-key: %d in 1s max; total: %d in 1s max; per key under total: %v",
		maxInWindow(keyTimes, time.Second), maxInWindow(totalTimes, time.Second), perTotalKey)
}

// deadRec records dead letters.
type deadRec struct {
	mu    sync.Mutex
	msgs  []queue.Message
	why   []string
	fail  atomic.Bool
	calls atomic.Int64
}

func (d *deadRec) Dead(ctx context.Context, r *rules.Rule, m queue.Message, reason string) error {
	d.calls.Add(1)
	if d.fail.Load() {
		return fmt.Errorf("dead letters down")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, m)
	d.why = append(d.why, reason)
	return nil
}

func (d *deadRec) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.msgs)
}

// stateRec records message states.
type stateRec struct {
	mu     sync.Mutex
	states map[string][]string
}

func (s *stateRec) Record(ctx context.Context, id, state string, attempt int, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.states == nil {
		s.states = map[string][]string{}
	}
	s.states[id] = append(s.states[id], fmt.Sprintf("%s/%d", state, attempt))
}

func TestStrictRetryHoldsBackTheKeyThenDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("strict", 1000, 0, nil) // max 3 attempts, backoff 10–40 ms
	flaky := e.enqueue(r, "k", `"flaky"`)
	after := e.enqueue(r, "k", `"after"`)
	doomed := e.enqueue(r, "k2", `"doomed"`)
	next := e.enqueue(r, "k2", `"next"`)
	bad := e.enqueue(r, "k3", `"bad"`)
	sink := &recSink{fn: func(ctx context.Context, m queue.Message, n int) drain.Outcome {
		switch {
		case m.ID == flaky.ID && n <= 2:
			return drain.OutcomeRetry(0, fmt.Sprintf("503 try %d", n))
		case m.ID == doomed.ID:
			return drain.OutcomeRetry(20*time.Millisecond, "connection refused")
		case m.ID == bad.ID:
			return drain.OutcomeDead("400 Bad Request")
		}
		return drain.OutcomeDelivered()
	}}
	dead := &deadRec{}
	states := &stateRec{}
	reg := prometheus.NewRegistry()
	e.drainer(context.Background(), sink, func(c *drain.Config) { c.DeadLetters = dead; c.States = states; c.Registerer = reg })
	waittest.Eventually(t, 20*time.Second, "queue drained", func() bool { return e.depth(r) == 0 && sink.count() == 9 })
	// Final outcomes: flaky delivered at its 3rd attempt, after and next at their 1st; doomed
	// dead after 3, bad dead at its 1st.
	waittest.Eventually(t, 10*time.Second, "five final outcomes", func() bool {
		n := 0
		for _, h := range histograms(reg, "sluice_delivery_attempts") {
			n += int(h.GetSampleCount())
		}
		return n == 5
	})
	for outcome, want := range map[string][2]float64{"delivered": {3, 5}, "dead": {2, 4}} {
		h := histograms(reg, "sluice_delivery_attempts")[outcome]
		if h == nil || float64(h.GetSampleCount()) != want[0] || h.GetSampleSum() != want[1] {
			t.Errorf("attempts of %s messages: %v, want %v messages taking %v attempts", outcome, h, want[0], want[1])
		}
	}
	// Nine sink answers: 2 (flaky) + 3 (doomed) classed as errors (no status), 1 (bad) too,
	// 3 accepted.
	classes := map[string]float64{}
	for _, m := range gather(reg, "sluice_sink_responses_total") {
		classes[label(m, "class")] += m.GetCounter().GetValue()
	}
	if classes["2xx"] != 3 || classes["error"] != 6 || len(classes) != 2 {
		t.Errorf("sink responses by class %v, want 2xx 3, error 6", classes)
	}
	var k, k2 []string
	for _, d := range sink.deliveries() {
		switch d.Key {
		case "k":
			k = append(k, fmt.Sprintf("%s/%d", d.Payload, d.Attempt))
		case "k2":
			k2 = append(k2, fmt.Sprintf("%s/%d", d.Payload, d.Attempt))
		}
	}
	if want := []string{`"flaky"/1`, `"flaky"/2`, `"flaky"/3`, `"after"/1`}; !slices.Equal(k, want) {
		t.Errorf("key k: %v, want %v (a retry must hold back later messages)", k, want)
	}
	if want := []string{`"doomed"/1`, `"doomed"/2`, `"doomed"/3`, `"next"/1`}; !slices.Equal(k2, want) {
		t.Errorf("key k2: %v, want %v", k2, want)
	}
	if dead.count() != 2 {
		t.Fatalf("%d dead letters, want 2 (doomed after 3 attempts, bad at once)", dead.count())
	}
	for i, m := range dead.msgs {
		if m.ID != doomed.ID && m.ID != bad.ID {
			t.Errorf("unexpected dead letter %s (%s)", m.ID, dead.why[i])
		}
		if m.ID == doomed.ID && (m.Attempt != 3 || m.LastError != "connection refused") {
			t.Errorf("doomed: attempt %d, last error %q", m.Attempt, m.LastError)
		}
	}
	states.mu.Lock()
	defer states.mu.Unlock()
	if got := states.states[flaky.ID]; !slices.Equal(got, []string{"delivering/1", "retrying/1", "delivering/2", "retrying/2", "delivering/3", "delivered/3"}) {
		t.Errorf("flaky states: %v", got)
	}
	if got := states.states[bad.ID]; !slices.Equal(got, []string{"delivering/1", "dead/1"}) {
		t.Errorf("bad states: %v", got)
	}
	_ = after
	_ = next
}

// retryRec is a Retrier that records what it was given.
type retryRec struct {
	mu  sync.Mutex
	got []queue.Message
}

func (r *retryRec) ScheduleRetry(ctx context.Context, rule *rules.Rule, m queue.Message, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
	return nil
}

func TestRelaxedOrderingHandsRetriesToTheRetrier(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("relaxed", 1000, 0, func(r *rules.Rule) { r.Ordering = rules.OrderingRelaxed })
	first := e.enqueue(r, "k", `1`)
	e.enqueue(r, "k", `2`)
	sink := &recSink{fn: func(ctx context.Context, m queue.Message, n int) drain.Outcome {
		if m.ID == first.ID {
			return drain.OutcomeRetry(time.Minute, "429")
		}
		return drain.OutcomeDelivered()
	}}
	rt := &retryRec{}
	e.drainer(context.Background(), sink, func(c *drain.Config) { c.Retrier = rt })
	waittest.Eventually(t, 20*time.Second, "both handled", func() bool { return e.depth(r) == 0 && sink.count() == 2 })
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.got) != 1 || rt.got[0].ID != first.ID || rt.got[0].Attempt != 1 || rt.got[0].LastError != "429" {
		t.Fatalf("retrier got %+v", rt.got)
	}
}

func TestHardStopMidDeliveryLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("hard", 1000, 0, nil)
	m := e.enqueue(r, "k", `"x"`)
	entered := make(chan struct{})
	var once sync.Once
	blocking := &recSink{fn: func(ctx context.Context, _ queue.Message, _ int) drain.Outcome {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return drain.OutcomeRetry(0, ctx.Err().Error())
	}}
	ctx, kill := context.WithCancel(context.Background())
	a := e.drainer(ctx, blocking, nil)
	<-entered
	kill() // hard stop while the sink holds the message
	<-a.Done()
	if d := e.depth(r); d != 1 {
		t.Fatalf("depth after hard stop %d, want 1", d)
	}
	sink := &recSink{}
	e.drainer(context.Background(), sink, nil)
	waittest.Eventually(t, 20*time.Second, "redelivery by a second drainer", func() bool { return sink.count() == 1 })
	if got := sink.deliveries()[0]; got.ID != m.ID || got.Attempt != 1 {
		t.Fatalf("second drainer delivered %+v, want id %s as attempt 1", got, m.ID)
	}
}

// TestHungDrainerIsReplacedAfterItsLease (claim engine: a hung delivery's claim lapses and
// another drainer takes the key); own: TestOwnEngineHungDeliveryIsRetriedByItsOwner.
func TestHungDrainerIsReplacedAfterItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("hung", 1000, 0, func(r *rules.Rule) { r.Sink.Timeout = 100 * time.Millisecond })
	m := e.enqueue(r, "k", `"x"`)
	e.enqueue(r, "k", `"y"`)
	release := make(chan struct{})
	entered := make(chan time.Time, 1)
	hung := &recSink{fn: func(ctx context.Context, _ queue.Message, _ int) drain.Outcome {
		select { // the first call; the hung drainer gives up on it and may claim k again
		case entered <- time.Now():
		default:
		}
		<-release // a stuck process: ignores its context
		return drain.OutcomeDelivered()
	}}
	e.drainer(context.Background(), hung, func(c *drain.Config) { claimEngine(c); c.Lease = time.Second; c.Workers = 1 })
	t.Cleanup(func() { close(release) }) // before the drainer's Stop (cleanups run last-in first-out)
	since := <-entered
	sink := &recSink{}
	e.drainer(context.Background(), sink, func(c *drain.Config) { claimEngine(c); c.Lease = time.Second })
	waittest.Eventually(t, 20*time.Second, "takeover", func() bool { return sink.count() == 2 })
	got := sink.deliveries()
	if got[0].ID != m.ID || got[1].Payload != `"y"` {
		t.Fatalf("takeover delivered %+v", got)
	}
	if wait := got[0].At.Sub(since); wait < 900*time.Millisecond {
		t.Fatalf("second drainer took the key after %s, before the 1 s lease expired", wait)
	}
}

func TestSoftStopFinishesInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("soft", 1000, 0, nil)
	e.enqueue(r, "k", `1`)
	entered := make(chan struct{})
	var once sync.Once
	slow := &recSink{fn: func(ctx context.Context, _ queue.Message, _ int) drain.Outcome {
		once.Do(func() { close(entered) })
		select {
		case <-time.After(200 * time.Millisecond):
			return drain.OutcomeDelivered()
		case <-ctx.Done():
			return drain.OutcomeRetry(0, "cancelled")
		}
	}}
	d := e.drainer(context.Background(), slow, nil)
	<-entered
	e.enqueue(r, "k", `2`)
	d.Stop()
	d.Stop() // twice is fine
	if err := d.Start(context.Background()); err == nil {
		t.Fatal("Start after Stop succeeded")
	}
	if got := slow.count(); got != 1 {
		t.Fatalf("%d deliveries; a stopping drainer must not claim more", got)
	}
	if dep := e.depth(r); dep != 1 {
		t.Fatalf("depth %d after soft stop: the in-flight message must be finished and deleted, the next kept", dep)
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	c := drain.Config{}.WithDefaults()
	if c.Workers != 32 || c.MaxClaimed != 128 || c.ClaimBatch != 32 || c.Lease != 2500*time.Millisecond || c.LeaseRenew != 833*time.Millisecond || c.Lookahead != 20*time.Millisecond || c.MaxPoll != 20*time.Millisecond {
		t.Errorf("defaults: %+v", c)
	}
	if err := c.Validate(); err == nil {
		t.Error("config without Queues/Scheduler/Rules/Sink validated")
	}
	bad := c
	bad.LeaseRenew = 2 * time.Second // more than Lease/2: one late renewal loses the key
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "LeaseRenew") {
		t.Errorf("LeaseRenew > Lease/2: %v", err)
	}
}

func TestPausedRuleClaimsNothingAndDepthIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("paused", 1000, 0, nil)
	e.enqueue(r, "k", `1`)
	var paused atomic.Bool
	paused.Store(true)
	var polls atomic.Int64
	reg := prometheus.NewRegistry()
	sink := &recSink{}
	e.drainer(context.Background(), sink, func(c *drain.Config) {
		c.Registerer = reg
		c.DepthEvery = 10 * time.Millisecond
		c.MaxPoll = 5 * time.Millisecond
		c.Policy = func(r *rules.Rule) drain.Policy {
			polls.Add(1)
			p := drain.RulePolicy(r)
			p.Paused = paused.Load()
			return p
		}
	})
	depth := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sluice_queue_depth" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	waittest.Eventually(t, 10*time.Second, "depth gauge", func() bool { return depth() == 1 })
	// The same sampling: the oldest message's age, JetStream's storage, the heartbeat.
	gauge := func(name string) float64 {
		for _, m := range gather(reg, name) {
			return m.GetGauge().GetValue()
		}
		return -1
	}
	waittest.Eventually(t, 10*time.Second, "oldest message age", func() bool { return gauge("sluice_queue_oldest_age_seconds") > 0 })
	if used := gauge("sluice_jetstream_store_bytes"); used <= 0 {
		t.Errorf("JetStream store used = %v bytes with a message stored", used)
	}
	if hb := gauge("sluice_drainer_heartbeat_timestamp_seconds"); time.Since(time.UnixMilli(int64(hb*1e3))) > time.Minute {
		t.Errorf("heartbeat %v is not recent", hb)
	}
	start := polls.Load()
	waittest.Eventually(t, 10*time.Second, "ten claim-loop turns while paused", func() bool { return polls.Load() >= start+10 })
	if n := sink.count(); n != 0 {
		t.Fatalf("%d deliveries from a paused rule", n)
	}
	paused.Store(false)
	waittest.Eventually(t, 10*time.Second, "delivery after unpause", func() bool { return sink.count() == 1 })
	waittest.Eventually(t, 10*time.Second, "depth gauge back to 0", func() bool { return depth() == 0 })
	waittest.Eventually(t, 10*time.Second, "oldest age back to 0", func() bool { return gauge("sluice_queue_oldest_age_seconds") == 0 })
}

// gather returns the series of one metric of reg.
func gather(reg *prometheus.Registry, name string) []*dto.Metric {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// histograms returns one histogram metric of reg by its outcome label.
func histograms(reg *prometheus.Registry, name string) map[string]*dto.Histogram {
	out := map[string]*dto.Histogram{}
	for _, m := range gather(reg, name) {
		out[label(m, "outcome")] = m.GetHistogram()
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestRefusedDeadLetterStaysQueuedAndIsNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("dead-refused", 1000, 0, nil)
	bad := e.enqueue(r, "k", `"bad"`)
	sink := &recSink{fn: func(ctx context.Context, m queue.Message, n int) drain.Outcome {
		return drain.OutcomeDead("422 Unprocessable Entity")
	}}
	dead := &deadRec{}
	dead.fail.Store(true)
	e.drainer(context.Background(), sink, func(c *drain.Config) { c.DeadLetters = dead })
	waittest.Eventually(t, 10*time.Second, "two refused dead-letter attempts", func() bool { return dead.calls.Load() >= 2 })
	if d := e.depth(r); d != 1 {
		t.Fatalf("depth %d while dead letters refuse: the message must stay", d)
	}
	dead.fail.Store(false)
	waittest.Eventually(t, 10*time.Second, "dead letter stored and message deleted", func() bool { return dead.count() == 1 && e.depth(r) == 0 })
	if n := sink.count(); n != 1 {
		t.Fatalf("sink called %d times: a message already judged dead must not be delivered again", n)
	}
	if dead.msgs[0].ID != bad.ID || dead.why[0] != "422 Unprocessable Entity" {
		t.Fatalf("dead letter %+v reason %q", dead.msgs[0], dead.why[0])
	}
}
