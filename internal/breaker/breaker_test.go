package breaker

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/rules"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var t0 = time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

var small = Config{Failures: 4, Keys: 2, Window: 2 * time.Second, CoolDown: time.Second, MaxCoolDown: 3 * time.Second}

// TestOpensOnlyWhenTheSinkFailsForEveryKey: one key failing, failures spread over more
// than the window, or a success within the window keep the breaker closed.
func TestOpensOnlyWhenTheSinkFailsForEveryKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		success  int // ms of a success before the failures; -1 none
		failures []failure
		want     State
	}{
		{"four failures over two keys", -1, []failure{{at(0), "a"}, {at(100), "b"}, {at(200), "a"}, {at(300), "b"}}, Open},
		{"one key only", -1, []failure{{at(0), "a"}, {at(100), "a"}, {at(200), "a"}, {at(300), "a"}}, Closed},
		{"too few", -1, []failure{{at(0), "a"}, {at(100), "b"}, {at(200), "c"}}, Closed},
		{"spread over more than the window", -1, []failure{{at(0), "a"}, {at(1000), "b"}, {at(2000), "c"}, {at(2500), "d"}}, Closed},
		{"a success within the window", 0, []failure{{at(100), "a"}, {at(200), "b"}, {at(300), "c"}, {at(400), "d"}}, Closed},
		{"a success before the window", 0, []failure{{at(2100), "a"}, {at(2200), "b"}, {at(2300), "c"}, {at(2400), "d"}}, Open},
	} {
		b := New("r", small, nil)
		if c.success >= 0 {
			b.OnSuccess(at(c.success))
		}
		for _, f := range c.failures {
			b.OnFailure(f.key, f.at)
		}
		if got := b.State(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestOpenProbeClose: open → no delivery during the cool-down → one probe → a failed
// probe doubles the cool-down (up to the maximum) → a successful probe closes; metrics
// follow.
func TestOpenProbeClose(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	b := New("orders", small, m)
	for i, k := range []string{"a", "b", "c", "d"} {
		b.OnFailure(k, at(i*100))
	}
	if b.State() != Open || testutil.ToFloat64(m.state.WithLabelValues("orders")) != 2 {
		t.Fatalf("state %s, gauge %v; want open, 2", b.State(), testutil.ToFloat64(m.state.WithLabelValues("orders")))
	}
	if u := b.Until(); !u.Equal(at(1300)) {
		t.Fatalf("Until = %v, want +1.3s (cool-down 1s from the opening failure)", u.Sub(t0))
	}
	if b.Allow(at(1299)) {
		t.Fatal("allowed during the cool-down")
	}
	// Probe 1 fails: cool-down 2s.
	if !b.Allow(at(1300)) || b.State() != HalfOpen {
		t.Fatal("no probe after the cool-down")
	}
	if b.Allow(at(1301)) {
		t.Fatal("a second delivery while the probe is out")
	}
	b.OnFailure("e", at(1400))
	if b.State() != Open || !b.Until().Equal(at(3400)) {
		t.Fatalf("after a failed probe: %s until %v, want open until +3.4s", b.State(), b.Until().Sub(t0))
	}
	// Probe 2 fails: cool-down 4s, capped at 3s.
	if !b.Allow(at(3400)) {
		t.Fatal("no second probe")
	}
	b.OnFailure("e", at(3500))
	if !b.Until().Equal(at(6500)) {
		t.Fatalf("cool-down not capped: open until %v, want +6.5s", b.Until().Sub(t0))
	}
	// Probe 3 succeeds: closed, cool-down back to 1s.
	if !b.Allow(at(6500)) {
		t.Fatal("no third probe")
	}
	b.OnSuccess(at(6600))
	if b.State() != Closed || !b.Allow(at(6601)) || !b.Until().IsZero() {
		t.Fatal("a successful probe did not close the breaker")
	}
	for _, c := range []struct {
		to   string
		want float64
	}{{"open", 3}, {"half_open", 3}, {"closed", 1}} {
		if got := testutil.ToFloat64(m.transitions.WithLabelValues("orders", c.to)); got != c.want {
			t.Errorf("transitions to %s: %v, want %v", c.to, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.state.WithLabelValues("orders")); got != 0 {
		t.Errorf("gauge %v after closing, want 0", got)
	}
	for i, k := range []string{"a", "b", "c", "d"} {
		b.OnFailure(k, at(20_000+i*100))
	}
	if !b.Until().Equal(at(21_300)) {
		t.Fatalf("after closing, the cool-down did not start over: until %v", b.Until().Sub(t0))
	}
	m.Forget("orders")
	if n := testutil.CollectAndCount(m.state); n != 0 {
		t.Fatalf("%d series after Forget", n)
	}
}

// TestLostProbeIsReplaced: a probe whose answer never comes does not stall the rule.
func TestLostProbeIsReplaced(t *testing.T) {
	t.Parallel()
	b := New("r", Config{Failures: 1, Keys: 1, CoolDown: time.Second, ProbeTimeout: 5 * time.Second}, nil)
	b.OnFailure("a", at(0))
	if !b.Allow(at(1000)) || b.Allow(at(5999)) || !b.Until().Equal(at(6000)) || !b.Allow(at(6000)) {
		t.Fatal("a lost probe was not replaced after ProbeTimeout")
	}
}

// TestNoAttemptsSpentWhileOpen drives the breaker as the engine does — ask Allow before
// each delivery, count an attempt only for an allowed one — against a sink that is down
// for 30 s then back, at 10 deliveries a second over 5 keys, with the defaults: 10
// failures open it (at 0.91 s, answers take 10 ms), then one probe per cool-down (5 s, 10 s,
// 20 s; probes at 6 s and 16.1 s fail):
// 12 attempts while the sink is down instead of 300, and the probe at 36.2 s closes it.
func TestNoAttemptsSpentWhileOpen(t *testing.T) {
	t.Parallel()
	b := New("r", Config{}, nil)
	attemptsWhileDown, refused := 0, 0
	var closedAt time.Time
	for ms := 0; ms < 40_000; ms += 100 {
		now := at(ms)
		k := fmt.Sprint("k", (ms/100)%5)
		if !b.Allow(now) {
			refused++
			continue
		}
		if ms < 30_000 {
			attemptsWhileDown++
			b.OnFailure(k, now.Add(10*time.Millisecond))
			continue
		}
		b.OnSuccess(now.Add(10 * time.Millisecond))
		if closedAt.IsZero() {
			closedAt = now
		}
	}
	t.Logf("attempts while the sink was down: %d of 300; refused without an attempt: %d; closed by the probe at %v", attemptsWhileDown, refused, closedAt.Sub(t0))
	if attemptsWhileDown != 12 || !closedAt.Equal(at(36_200)) || b.State() != Closed {
		t.Fatalf("attempts while down %d (want 12), closed at %v (want 36.2s), state %s", attemptsWhileDown, closedAt.Sub(t0), b.State())
	}
}

// TestDefaultsAreTheRulesDefaults: docs/rules.md documents rules' defaults for
// sink.breaker; they are this package's.
func TestDefaultsAreTheRulesDefaults(t *testing.T) {
	t.Parallel()
	got := Config{}.withDefaults()
	want := Config{Failures: rules.DefaultBreakerFailures, Keys: rules.DefaultBreakerMinKeys, Window: rules.DefaultBreakerWithin,
		CoolDown: rules.DefaultBreakerCoolDown, MaxCoolDown: rules.DefaultBreakerMaxCoolDown, ProbeTimeout: DefaultProbeTimeout}
	if got != want {
		t.Fatalf("breaker defaults %+v, rules' %+v", got, want)
	}
}

func TestFromRule(t *testing.T) {
	t.Parallel()
	c := FromRule(rules.Breaker{Enabled: true, Failures: 4, MinKeys: 2, Within: time.Second, CoolDown: 2 * time.Second, MaxCoolDown: time.Minute})
	if c != (Config{Failures: 4, Keys: 2, Window: time.Second, CoolDown: 2 * time.Second, MaxCoolDown: time.Minute}) {
		t.Fatalf("%+v", c)
	}
}

// TestNotifySnapshot: every change of state calls Notify's function once, and Snapshot
// says the state, since when, and an open breaker's next probe.
func TestNotifySnapshot(t *testing.T) {
	b := New("r", Config{Failures: 2, Keys: 2, Window: time.Second, CoolDown: time.Second}, nil)
	calls := make(chan Snapshot, 10)
	b.Notify(func() { calls <- b.Snapshot() })
	now := time.Unix(100, 0)
	b.OnFailure("a", now)
	b.OnFailure("b", now)
	s := <-calls
	if s.State != Open || !s.Since.Equal(now) || !s.NextProbe.Equal(now.Add(time.Second)) {
		t.Fatalf("after opening: %+v", s)
	}
	if !b.Allow(now.Add(time.Second)) {
		t.Fatal("no probe after the cool-down")
	}
	if s := <-calls; s.State != HalfOpen || !s.NextProbe.IsZero() {
		t.Fatalf("probing: %+v", s)
	}
	b.OnSuccess(now.Add(2 * time.Second))
	if s := <-calls; s.State != Closed || !s.Since.Equal(now.Add(2*time.Second)) {
		t.Fatalf("closed: %+v", s)
	}
	b.OnSuccess(now.Add(3 * time.Second)) // no change, no call
	select {
	case s := <-calls:
		t.Fatalf("a call without a change: %+v", s)
	default:
	}
}
