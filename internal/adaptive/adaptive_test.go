package adaptive

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

var t0 = time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestThrottleDecreasesAndHolds(t *testing.T) {
	t.Parallel()
	l := New(Config{})
	if got := l.Rate("k", 10); got != 10 {
		t.Fatalf("untouched key: %v/s, want the configured 10", got)
	}
	l.OnThrottle("k", at(0), 3*time.Second)
	if got := l.Rate("k", 10); got != 5 {
		t.Fatalf("after a 429: %v/s, want 5 (decrease 0.5)", got)
	}
	if h := l.HeldUntil("k"); !h.Equal(at(3000)) {
		t.Fatalf("held until %v, want +3s (the Retry-After)", h.Sub(t0))
	}
	// An answer to a delivery sent before the decrease does not compound it.
	l.OnThrottle("k", at(400), 0)
	if got := l.Rate("k", 10); got != 5 {
		t.Fatalf("second throttle within the guard: %v/s, want 5", got)
	}
	// A timeout a second later is new information.
	l.OnThrottle("k", at(1500), 0)
	if got := l.Rate("k", 10); got != 2.5 {
		t.Fatalf("after a timeout: %v/s, want 2.5", got)
	}
	// The configured outflow changed (an override): the key stays at its share of it.
	if got := l.Rate("k", 20); got != 5 {
		t.Fatalf("configured 20: %v/s, want 5", got)
	}
	if got := l.Every("k", 100*time.Millisecond); got != 400*time.Millisecond {
		t.Fatalf("Every = %v, want 400ms", got)
	}
	if got := l.Every("other", 100*time.Millisecond); got != 100*time.Millisecond {
		t.Fatalf("Every of an untouched key = %v, want the configured 100ms", got)
	}
}

func TestFloor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want float64
	}{
		{Config{}, 0.1},              // 1 % of 10/s
		{Config{MinOutflow: 2}, 2},   // min_outflow
		{Config{MinOutflow: 50}, 10}, // never above configured, even by the floor
	} {
		l := New(c.cfg)
		for i := range 40 {
			l.OnThrottle("k", at(i*2000), 0)
		}
		if got := l.Rate("k", 10); got != c.want {
			t.Errorf("%+v: after 40 throttles %v/s, want the floor %v", c.cfg, got, c.want)
		}
	}
}

// TestSuccessClimbsBackNeverAbove: successes add IncreasePerSecond of the configured
// outflow per second of successes (slowly near the share last throttled at), never above
// the configured outflow; a key back there is forgotten.
func TestSuccessClimbsBackNeverAbove(t *testing.T) {
	t.Parallel()
	l := New(Config{Decrease: 0.5, IncreasePerSecond: 0.1})
	l.OnThrottle("k", at(0), 0) // share 0.5; throttled at 1.0
	// 4 s of successes, 10 a second: +0.4 → 0.9, the slow band's edge.
	for i := 1; i <= 40; i++ {
		l.OnSuccess("k", at(i*100))
	}
	if got := l.Rate("k", 10); got < 8.99 || got > 9.01 {
		t.Fatalf("after 4 s of successes: %v/s, want 9", got)
	}
	// In the band [0.9, 1.05] of the throttled share the climb is 50 times slower.
	for i := 41; i <= 50; i++ {
		l.OnSuccess("k", at(i*100))
	}
	if got := l.Rate("k", 10); got < 9.015 || got > 9.025 {
		t.Fatalf("1 s in the slow band: %v/s, want 9.02", got)
	}
	// A long idle gap counts one second at most.
	l.OnSuccess("k", at(60_000))
	if got := l.Rate("k", 10); got > 9.05 {
		t.Fatalf("after an idle minute: %v/s, want ≤ 9.04", got)
	}
	for i := range 100_000 {
		l.OnSuccess("k", at(61_000+i*100))
		if got := l.Rate("k", 10); got > 10 {
			t.Fatalf("above the configured outflow: %v/s", got)
		}
		if l.Len() == 0 {
			break
		}
	}
	if l.Len() != 0 || l.Rate("k", 10) != 10 {
		t.Fatalf("a recovered key is still remembered (%d keys, %v/s)", l.Len(), l.Rate("k", 10))
	}
	// Successes of a key never throttled remember nothing.
	l.OnSuccess("fresh", at(0))
	if l.Len() != 0 {
		t.Fatal("a success created an entry")
	}
}

// TestHoldStartsTheClimb: the Retry-After is not a second of successes: the first
// success after a hold climbs by what the time since the hold ended is worth.
func TestHoldStartsTheClimb(t *testing.T) {
	t.Parallel()
	l := New(Config{Decrease: 0.5, IncreasePerSecond: 0.1})
	l.OnThrottle("k", at(0), 5*time.Second)
	l.OnSuccess("k", at(5100))
	if got := l.Rate("k", 10); got < 5.099 || got > 5.101 {
		t.Fatalf("first success 100 ms after a 5 s hold: %v/s, want 5.1 (not 6: the hold is not a second of successes)", got)
	}
}

func TestBoundedMemory(t *testing.T) {
	t.Parallel()
	l := New(Config{MaxKeys: 1000})
	for i := range 5000 {
		l.OnThrottle(fmt.Sprint("k", i), at(0), time.Second)
	}
	if l.Len() != 1000 || l.Evicted() != 4000 {
		t.Fatalf("%d keys remembered, %d evicted; want 1000 and 4000", l.Len(), l.Evicted())
	}
	l.Forget("k4999")
	if l.Len() > 999 {
		t.Fatal("Forget kept the key")
	}
}

// TestDefaultsAreTheRulesDefaults: docs/rules.md documents rules' defaults for
// delivery.adaptive; they are this package's.
func TestDefaultsAreTheRulesDefaults(t *testing.T) {
	t.Parallel()
	if rules.DefaultAdaptiveDecrease != DefaultDecrease || rules.DefaultAdaptiveIncreasePerSecond != DefaultIncreasePerSecond {
		t.Fatalf("rules: %v, %v; adaptive: %v, %v", rules.DefaultAdaptiveDecrease, rules.DefaultAdaptiveIncreasePerSecond, DefaultDecrease, DefaultIncreasePerSecond)
	}
}

func TestFromRule(t *testing.T) {
	t.Parallel()
	c := FromRule(rules.Adaptive{Enabled: true, Decrease: 0.7, IncreasePerSecond: 0.2, MinOutflow: rules.Rate{Requests: 30, Interval: time.Minute}})
	if c != (Config{Decrease: 0.7, IncreasePerSecond: 0.2, MinOutflow: 0.5}) {
		t.Fatalf("%+v", c)
	}
	if got := New(FromRule(rules.Adaptive{Enabled: true})).Config(); got.Decrease != DefaultDecrease || got.MinOutflow != 0 {
		t.Fatalf("zero rule fields do not take the defaults: %+v", got)
	}
}

// TestStateRestore: a key's state moves to another Limiter (a partition's new owner) with
// its outflow, ceiling and hold; a key at its configured outflow has none to move.
func TestStateRestore(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := New(Config{}), New(Config{})
	a.OnThrottle("k", now, 2*time.Second)
	st, ok := a.State("k")
	if !ok || st.Share != 0.5 || !st.Held.Equal(now.Add(2*time.Second)) {
		t.Fatalf("State = %+v, %v; want share 0.5 held 2s", st, ok)
	}
	if _, ok := a.State("other"); ok {
		t.Fatal("a key never throttled has a state")
	}
	b.Restore("k", st, now.Add(100*time.Millisecond))
	if got := b.Every("k", 100*time.Millisecond); got != 200*time.Millisecond {
		t.Errorf("restored key at %v, want 200ms (half of 10/s)", got)
	}
	if h := b.HeldUntil("k"); !h.Equal(now.Add(2 * time.Second)) {
		t.Errorf("restored hold %v", h)
	}
	// The new owner's own throttle lowers it further at once.
	b.OnThrottle("k", now.Add(200*time.Millisecond), 0)
	if got := b.Every("k", 100*time.Millisecond); got != 400*time.Millisecond {
		t.Errorf("after a throttle on the new owner: %v, want 400ms", got)
	}
	b.Restore("full", State{Share: 1}, now)
	if b.Len() != 1 {
		t.Errorf("a state at full outflow was kept: %d keys", b.Len())
	}
}
