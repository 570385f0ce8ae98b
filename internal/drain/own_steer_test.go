package drain_test

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/internal/window"
	"github.com/sluice-io/sluice/queue"
)

// keyIndex opens a per-key override index on the env's JetStream, as each process does
// (its own index on the shared bucket).
func (e *env) keyIndex() *overrides.KeyIndex {
	e.t.Helper()
	ctx := context.Background()
	ks, err := overrides.OpenKeys(ctx, e.js, overrides.KeyConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	x := overrides.NewKeyIndex(ks, overrides.KeyIndexConfig{SweepEvery: -1})
	if err := x.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(x.Stop)
	return x
}

// starts returns the sorted delivery starts of key at or after from.
func (s *stampSink) starts(key string, from time.Time) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for _, t := range s.at[key] {
		if !t.Before(from) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func between(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// TestSteerKeyOverrideOwnEngine: with two drainers (own engine, each with its own index on
// the shared bucket), a key override of 20/s where the rule says 5/s, and a paused key, are
// obeyed within 1 s of being written; the other key keeps the rule's 5/s; removing the
// pause resumes the key within 1 s. Fails on an engine that ignores Config.KeyOverrides.
func TestSteerKeyOverrideOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("steer", 5, 0, nil)
	e.publish(r, []string{"fast"}, 120)
	e.publish(r, []string{"slow", "held"}, 40)
	sink := &stampSink{}
	ctx := context.Background()
	for range 2 {
		x := e.keyIndex()
		e.drainer(ctx, sink, func(c *drain.Config) { ownEngine(c); c.KeyOverrides = x })
	}
	waittest.Eventually(t, 30*time.Second, "the drainers deliver", func() bool { return sink.n.Load() >= 3 })

	ks, err := overrides.OpenKeys(ctx, e.js, overrides.KeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := ks.PutKeys(ctx, r.Name, []overrides.KeyWrite{
		{Key: "fast", Override: overrides.KeyOverride{Outflow: rules.Rate{Requests: 20, Interval: time.Second}}},
		{Key: "held", Override: overrides.KeyOverride{Paused: true}},
	}); err != nil {
		t.Fatal(err)
	}
	from, to := t0.Add(time.Second), t0.Add(3*time.Second)
	waittest.Eventually(t, 10*time.Second, "two seconds of deliveries after the override took effect", func() bool {
		return time.Now().After(to)
	})
	fast, slow, held := sink.starts("fast", from), sink.starts("slow", from), sink.starts("held", from)
	nf, ns, nh := between(fast, from, to), between(slow, from, to), between(held, from, to)
	t.Logf("in the 2 s from 1 s after the override: fast %d (20/s override), slow %d (rule 5/s), held %d (paused)", nf, ns, nh)
	if nf < 34 || nf > 42 {
		t.Errorf("fast: %d deliveries in 2 s, want ~40 (its override of 20/s)", nf)
	}
	if ns < 8 || ns > 12 {
		t.Errorf("slow: %d deliveries in 2 s, want ~10 (the rule's 5/s)", ns)
	}
	if nh != 0 {
		t.Errorf("held: %d deliveries from 1 s after its pause, want 0", nh)
	}
	// Never above the override: two starts of fast at least ~1/20 s apart (timer slack).
	for i := 1; i < len(fast); i++ {
		if gap := fast[i].Sub(fast[i-1]); gap < 45*time.Millisecond {
			t.Errorf("fast: two deliveries %v apart, want ≥ 50ms less timer slack", gap)
			break
		}
	}

	// Unpause: the held key goes on within 1 s.
	t1 := time.Now()
	if _, err := ks.PutKeys(ctx, r.Name, []overrides.KeyWrite{{Key: "held"}}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 5*time.Second, "the unpaused key delivers", func() bool { return len(sink.starts("held", t1)) > 0 })
	if took := sink.starts("held", t1)[0].Sub(t1); took > time.Second {
		t.Errorf("held: first delivery %v after its pause was removed, want ≤ 1s", took)
	}
}

// jitterSink answers every third delivery slowly: without strict spacing the
// key's next delivery follows on its grid slot right behind a late one.
type jitterSink struct {
	stampSink
	i atomic.Int64
}

func (s *jitterSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	out := s.stampSink.Deliver(ctx, r, m)
	if s.i.Add(1)%3 == 0 {
		time.Sleep(15 * time.Millisecond) // a slow answer: the key's next slot may have passed
	}
	return out
}

// TestSteerStrictSpacingOwnEngine: with delivery.spacing strict, over 1,000 deliveries of
// 4 keys at 50/s (and slow answers that make later slots pass), no two deliveries of a key
// start closer than 1/outflow (20ms).
func TestSteerStrictSpacingOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("strict", 50, 0, func(r *rules.Rule) { r.Delivery.Spacing = rules.SpacingStrict })
	keys := keyNames(4)
	e.publish(r, keys, 250)
	sink := &jitterSink{}
	e.drainer(context.Background(), sink, ownEngine)
	waittest.Eventually(t, time.Minute, "every message delivered", func() bool { return sink.n.Load() >= 1000 })
	minGap := time.Hour
	for _, k := range keys {
		st := sink.starts(k, time.Time{})
		for i := 1; i < len(st); i++ {
			minGap = min(minGap, st[i].Sub(st[i-1]))
		}
	}
	t.Logf("smallest gap between two starts of a key over %d deliveries: %v (interval 20ms)", sink.n.Load(), minGap)
	if minGap < 20*time.Millisecond {
		t.Errorf("two deliveries of a key started %v apart, want ≥ 20ms (delivery.spacing strict)", minGap)
	}
}

// TestSteerWindowOwnEngine: a rule's delivery.window follows each message's zone (the
// Sluice-Time-Zone header), UTC for the others. The window opens 2 s from now on Seoul's
// wall clock: the Seoul key's messages wait for it and go in order once it opens; the key
// without a zone is judged in UTC, where the window is 9 hours away, and delivers nothing.
func TestSteerWindowOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Skip("no tz database:", err)
	}
	opens := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	local := opens.In(seoul)
	from := time.Duration(local.Hour())*time.Hour + time.Duration(local.Minute())*time.Minute +
		time.Duration(local.Second())*time.Second + time.Duration(local.Nanosecond())
	r := e.rule("window", 100, 0, func(r *rules.Rule) {
		r.Delivery.Window = window.Window{From: from, To: min(from+time.Hour, 24*time.Hour), FromMessage: true, Set: true}
	})
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		for _, k := range []string{"seoul", "utc"} {
			m := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Rule: r.Name, Key: k, Payload: []byte(strconv.Itoa(i)), CreatedAt: time.Now()}
			if k == "seoul" {
				m.Headers = map[string]string{window.HeaderTimeZone: "Asia/Seoul"}
				ids = append(ids, m.ID)
			}
			if _, err := e.q.Enqueue(ctx, r.Name, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	sink := &orderSink{}
	e.drainer(ctx, sink, ownEngine)
	waittest.Eventually(t, 30*time.Second, "the Seoul key's messages delivered once its window opens", func() bool { return len(sink.ids("seoul")) >= 5 })
	first := sink.first("seoul")
	t.Logf("window opened at %s; first delivery %v after it", opens.Format(time.RFC3339Nano), first.Sub(opens))
	if first.Before(opens) {
		t.Errorf("delivered %v before its window opened", opens.Sub(first))
	}
	if first.Sub(opens) > time.Second {
		t.Errorf("first delivery %v after the window opened, want ≤ 1s", first.Sub(opens))
	}
	if got := sink.ids("seoul"); !slices.Equal(got, ids) {
		t.Errorf("Seoul key delivered %v, want %v in order", got, ids)
	}
	if n := len(sink.ids("utc")); n != 0 {
		t.Errorf("the key without a zone (UTC: window 9 h away) delivered %d, want 0", n)
	}
}

// orderSink records each key's delivered ids in order and its first and last delivery's
// start.
type orderSink struct {
	mu     sync.Mutex
	got    map[string][]string
	first0 map[string]time.Time
	last0  map[string]time.Time
}

func (s *orderSink) Deliver(_ context.Context, _ *rules.Rule, m queue.Message) drain.Outcome {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got == nil {
		s.got, s.first0, s.last0 = map[string][]string{}, map[string]time.Time{}, map[string]time.Time{}
	}
	if _, ok := s.first0[m.Key]; !ok {
		s.first0[m.Key] = now
	}
	s.last0[m.Key] = now
	s.got[m.Key] = append(s.got[m.Key], m.ID)
	return drain.OutcomeDelivered()
}

func (s *orderSink) ids(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got[key])
}

func (s *orderSink) first(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first0[key]
}

func (s *orderSink) last(key string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last0[key]
}

// TestSteerAdaptiveOwnEngine: a rule at 10/s per key with delivery.adaptive, against a real
// HTTP sink that admits 7/s per key (429 with Retry-After above it): after convergence each
// key's accepted throughput is near 7/s and few attempts are answered 429.
func TestSteerAdaptiveOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs, _ := sinktest.StartLimited(t, 7, time.Second)
	r := e.rule("adaptive", 10, 0, func(r *rules.Rule) {
		r.Sink.URL = hs.URL
		r.Delivery.Adaptive = rules.Adaptive{Enabled: true}
		r.Delivery.MaxAttempts = 100
	})
	keys := keyNames(3)
	e.publish(r, keys, 300)
	httpSink, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.drainer(context.Background(), httpSink, ownEngine)
	from, to := start.Add(15*time.Second), start.Add(30*time.Second)
	waittest.Eventually(t, time.Minute, "30 s of deliveries", func() bool { return time.Now().After(to) })
	var acc, throttled int
	for _, dl := range hs.All() {
		if dl.At.Before(from) || !dl.At.Before(to) {
			continue
		}
		if dl.Answered == 429 {
			throttled++
		} else {
			acc++
		}
	}
	secs := to.Sub(from).Seconds()
	perKey := float64(acc) / secs / float64(len(keys))
	share := float64(throttled) / float64(max(1, acc+throttled))
	t.Logf("after convergence (15-30 s): %.2f/s accepted per key (sink admits 7/s, rule 10/s), %d of %d attempts answered 429 (%.1f%%)",
		perKey, throttled, acc+throttled, 100*share)
	// Never above what the sink admits. Near it from below: 6.73/s measured without the race
	// detector; under -race on a loaded 2-core machine (make test) the climb back is slower
	// and 5.40/s was seen after 30 s, so the floor there only shows the key was not left at
	// its first halving.
	floor := 6.0
	if raceOn {
		floor = 4.5
	}
	if perKey < floor || perKey > 7.2 {
		t.Errorf("%.2f/s accepted per key, want near 7/s (at least %.1f)", perKey, floor)
	}
	if share > 0.10 {
		t.Errorf("%.1f%% of attempts answered 429 after convergence, want ≤ 10%%", 100*share)
	}
}

// syncBuf is a log destination safe for the drainer's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestSteerClaimEngineWarnsOnce: under the claim engine a rule with steering options is
// drained without them, and the drainer says so once per rule (not on every rules poll).
func TestSteerClaimEngineWarnsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rule("steered", 10, 0, func(r *rules.Rule) {
		r.Delivery.Spacing = rules.SpacingStrict
		r.Sink.Breaker = rules.Breaker{Enabled: true}
	})
	e.rule("plain", 10, 0, nil)
	var buf syncBuf
	d := e.drainer(context.Background(), &stampSink{}, func(c *drain.Config) {
		c.Engine = drain.EngineClaim
		c.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	waittest.Eventually(t, 10*time.Second, "the warning", func() bool { return strings.Contains(buf.String(), "steering options") })
	sig := drain.SignalsOf(d)
	sig.Wait(t, 10*time.Second, drain.RulesPolled, sig.Count(drain.RulesPolled)+5) // several rules polls: no repeat
	out := buf.String()
	if n := strings.Count(out, "steering options"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "rule=steered") || !strings.Contains(out, "delivery.spacing") || !strings.Contains(out, "sink.breaker") {
		t.Errorf("warning does not name the rule and its options:\n%s", out)
	}
}

// TestSteerBreakerOwnEngine: a real HTTP sink answers 500 to every key for 3 s. With
// sink.breaker the rule's deliveries stop after the failures that open it and only probes
// reach the sink (refused deliveries spend no attempt); when the sink recovers a probe
// closes the breaker and every message is delivered.
func TestSteerBreakerOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := sinktest.Start(t)
	var down atomic.Bool
	down.Store(true)
	hs.Answer(func(sinktest.Delivery) (int, string) {
		if down.Load() {
			return 500, ""
		}
		return 200, ""
	})
	r := e.rule("breaker", 20, 0, func(r *rules.Rule) {
		r.Sink.URL = hs.URL
		r.Delivery.MaxAttempts = 1000
		r.Sink.Breaker = rules.Breaker{Enabled: true, Failures: 4, MinKeys: 2, Within: 5 * time.Second,
			CoolDown: 500 * time.Millisecond, MaxCoolDown: 500 * time.Millisecond}
	})
	keys := keyNames(4)
	e.publish(r, keys, 10)
	httpSink, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.drainer(context.Background(), httpSink, ownEngine)
	outage := start.Add(3 * time.Second)
	waittest.Eventually(t, 10*time.Second, "the outage", func() bool { return time.Now().After(outage) })
	down.Store(false)
	during := len(hs.All())
	t.Cleanup(func() { t.Logf("at the end: %d attempts, %d accepted", len(hs.All()), len(hs.Accepted())) })
	waittest.Eventually(t, 30*time.Second, "every message delivered after the sink recovers", func() bool { return len(hs.Accepted()) >= 40 })
	t.Logf("3 s outage over 4 keys at 20/s (backoff 10-40 ms): %d attempts reached the sink during it; all 40 delivered %v after it",
		during, time.Since(outage).Round(time.Millisecond))
	// 4 failures to open, then one probe per 500 ms cool-down (~6), with slack for answers in
	// flight; without the breaker it is hundreds.
	if during > 20 {
		t.Errorf("%d attempts during the outage, want ≤ 20 (breaker open: probes only)", during)
	}
}
