package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/internal/window"
)

// hoursFrom is a UTC window from h hours after now's hour for n hours (mod 24), so a test
// gets a window open now (h = -1, n = 3) or shut now (h = 3, n = 1) whatever the hour.
func hoursFrom(now time.Time, h, n int) window.Window {
	start := (now.UTC().Hour() + h + 24) % 24
	end := (start + n) % 24
	return window.Window{From: time.Duration(start) * time.Hour, To: time.Duration(end) * time.Hour, Set: true}
}

// TestSteerKeyWindowOverrideOwnEngine: two drainers (own engine) on a rule whose
// delivery.window is open now. Key "shut" is given a window of its own that is shut now,
// for about 3 s: within 1 s it stops while key "open" of the same rule goes on at the
// rule's outflow; when the override ends by itself the rule's window applies to "shut"
// again and it resumes within 1 s.
func TestSteerKeyWindowOverrideOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now()
	r := e.rule("keywin", 10, 0, func(r *rules.Rule) { r.Delivery.Window = hoursFrom(now, -1, 3) })
	e.publish(r, []string{"shut", "open"}, 200)
	ctx := context.Background()
	sink := &stampSink{}
	for range 2 {
		x := e.keyIndex()
		e.drainer(ctx, sink, func(c *drain.Config) { ownEngine(c); c.KeyOverrides = x })
	}
	waittest.Eventually(t, 30*time.Second, "both keys deliver", func() bool {
		return len(sink.starts("shut", time.Time{})) >= 3 && len(sink.starts("open", time.Time{})) >= 3
	})
	ks, err := overrides.OpenKeys(ctx, e.js, overrides.KeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	shut := hoursFrom(time.Now(), 3, 1)
	end := time.Now().Add(3500 * time.Millisecond).Truncate(time.Second) // stored to the second
	written := time.Now()
	if _, err := ks.PutKeys(ctx, r.Name, []overrides.KeyWrite{
		{Key: "shut", Override: overrides.KeyOverride{Window: &shut, Until: end}},
	}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 20*time.Second, "2 s after the override ended", func() bool { return time.Since(end) > 2*time.Second })
	s, o := sink.starts("shut", written), sink.starts("open", written)
	last := written
	for _, at := range s {
		if at.Before(end) {
			last = at
		}
	}
	stopped := last.Sub(written)
	openDuring := between(o, written.Add(time.Second), end)
	t.Logf("shut: last delivery %v after its window override was written; open: %d deliveries meanwhile (%.1f/s, rule 10/s)",
		stopped.Round(time.Millisecond), openDuring, float64(openDuring)/end.Sub(written.Add(time.Second)).Seconds())
	if stopped > time.Second {
		t.Errorf("shut: delivered %v after its window override was written, want ≤ 1s", stopped)
	}
	if n := between(s, written.Add(time.Second), end); n != 0 {
		t.Errorf("shut: %d deliveries while its own window was shut, want 0", n)
	}
	if openDuring < 10 {
		t.Errorf("open: %d deliveries while shut waited, want ~10/s", openDuring)
	}
	var resumed time.Time
	for _, at := range s {
		if !at.Before(end) {
			resumed = at
			break
		}
	}
	if resumed.IsZero() {
		t.Fatal("shut: nothing delivered after its override ended (the rule's window is open)")
	}
	t.Logf("shut: first delivery %v after the override ended", resumed.Sub(end).Round(time.Millisecond))
	if took := resumed.Sub(end); took > time.Second {
		t.Errorf("shut: resumed %v after its override ended, want ≤ 1s", took)
	}
	if n := between(s, end.Add(500*time.Millisecond), end.Add(1500*time.Millisecond)); n < 7 {
		t.Errorf("shut: %d deliveries in the second after it resumed, want ~10 (the rule's 10/s)", n)
	}
}

// TestSteerKeyWindowOpensOwnEngine: the other way round — a rule whose delivery.window is
// shut now, two drainers (own engine). A key given an open window of its own for about
// 3 s delivers within 1 s of the write while the rule's other keys wait, and stops
// within 1 s of the override's end (the rule's window again).
func TestSteerKeyWindowOpensOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("keyopen", 10, 0, func(r *rules.Rule) { r.Delivery.Window = hoursFrom(time.Now(), 3, 1) })
	e.publish(r, []string{"probe", "vip", "other"}, 100)
	ctx := context.Background()
	sink := &stampSink{}
	for range 2 {
		x := e.keyIndex()
		e.drainer(ctx, sink, func(c *drain.Config) { ownEngine(c); c.KeyOverrides = x })
	}
	ks, err := overrides.OpenKeys(ctx, e.js, overrides.KeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	open := hoursFrom(time.Now(), -1, 3)
	// probe's own open window shows that the drainers run and read the overrides.
	if _, err := ks.PutKeys(ctx, r.Name, []overrides.KeyWrite{{Key: "probe", Override: overrides.KeyOverride{Window: &open}}}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 30*time.Second, "probe delivers in its own window", func() bool { return len(sink.starts("probe", time.Time{})) >= 5 })
	end := time.Now().Add(3500 * time.Millisecond).Truncate(time.Second)
	written := time.Now()
	if _, err := ks.PutKeys(ctx, r.Name, []overrides.KeyWrite{{Key: "vip", Override: overrides.KeyOverride{Window: &open, Until: end}}}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 20*time.Second, "2 s after the override ended", func() bool { return time.Since(end) > 2*time.Second })
	vip := sink.starts("vip", time.Time{})
	if len(vip) == 0 {
		t.Fatal("vip: nothing delivered in its own open window")
	}
	var last time.Time
	for _, at := range vip {
		last = at
	}
	t.Logf("vip: first delivery %v after its window override was written, %d in its window, last %v after the override ended; other: %d",
		vip[0].Sub(written).Round(time.Millisecond), len(vip), last.Sub(end).Round(time.Millisecond), len(sink.starts("other", time.Time{})))
	if took := vip[0].Sub(written); took < 0 || took > time.Second {
		t.Errorf("vip: first delivery %v after the write, want within 1s", took)
	}
	if n := between(vip, written.Add(time.Second), end); n < 15 {
		t.Errorf("vip: %d deliveries in its window, want ~10/s", n)
	}
	if last.Sub(end) > time.Second {
		t.Errorf("vip: delivered %v after its override ended (the rule's window is shut), want ≤ 1s", last.Sub(end))
	}
	if n := len(sink.starts("other", time.Time{})); n != 0 {
		t.Errorf("other: %d deliveries in the rule's shut window", n)
	}
}
