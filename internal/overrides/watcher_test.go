package overrides_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/waittest"
)

// contract is docs/http-api.md's PATCH /v1/admin/queues/{name}: "reaches every drainer within a second".
const contract = time.Second

func startWatcher(t testing.TB, s *overrides.Store, cfg overrides.WatcherConfig) *overrides.Watcher {
	t.Helper()
	w := overrides.NewWatcher(s, cfg)
	if err := w.Start(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// waitChanged fails unless ch is closed within d.
func waitChanged(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s: no change notification within %s", what, d)
	}
}

func TestWatcherSeesChangeWithinContract(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)

	var mu sync.Mutex
	var changed []string
	w := startWatcher(t, s, overrides.WatcherConfig{OnChange: func(rule string) {
		mu.Lock()
		changed = append(changed, rule)
		mu.Unlock()
	}})
	if !w.Synced() {
		t.Fatal("Start returned before the first sync")
	}
	if _, ok := w.Get(r.Name); ok {
		t.Fatal("override before any was written")
	}

	ch := w.Changed()
	if _, err := s.Apply(ctx, r, overrides.Patch{Outflow: rate(2, time.Second), Paused: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, ch, contract, "patch")
	o, ok := w.Get(r.Name)
	if !ok || !o.IsPaused() || *o.Outflow != *rate(2, time.Second) {
		t.Fatalf("Get after notification = %v, %v", o, ok)
	}
	eff, wo, err := w.Effective(r)
	if err != nil || eff.Queue.Outflow.Every() != 500*time.Millisecond || !wo.IsPaused() {
		t.Fatalf("Watcher.Effective = %+v, %v, %v", eff.Queue, wo, err)
	}

	ch = w.Changed()
	if err := s.Reset(ctx, r.Name); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, ch, contract, "reset")
	if o, ok := w.Get(r.Name); ok {
		t.Fatalf("override still there after reset: %v", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changed) != 2 || changed[0] != r.Name || changed[1] != r.Name {
		t.Errorf("OnChange calls = %v, want two for %s", changed, r.Name)
	}
}

func TestWatcherLoadsExistingOverridesAtStart(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(42)}); err != nil {
		t.Fatal(err)
	}
	other := *r
	other.Name = "gone"
	if _, err := s.Apply(ctx, &other, overrides.Patch{Capacity: i64(1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, other.Name); err != nil {
		t.Fatal(err)
	}

	w := startWatcher(t, s, overrides.WatcherConfig{})
	// Start waits for the initial read: no polling needed.
	if o, ok := w.Get(r.Name); !ok || *o.Capacity != 42 {
		t.Fatalf("Get right after Start = %v, %v", o, ok)
	}
	if _, ok := w.Get("gone"); ok {
		t.Fatal("a reset override was loaded")
	}
	if all := w.All(); len(all) != 1 {
		t.Fatalf("All = %v", all)
	}
}

func TestTwoWatchersBothSeeIt(t *testing.T) {
	t.Parallel()
	node, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)

	// Two drainers: each with its own connection and store, as in production.
	var ws []*overrides.Watcher
	for range 2 {
		_, js := natstest.Connect(t, node.URL())
		ds, err := overrides.Open(ctx, js, overrides.Config{Bucket: s.Bucket()})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, startWatcher(t, ds, overrides.WatcherConfig{}))
	}
	chs := []<-chan struct{}{ws[0].Changed(), ws[1].Changed()}
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(9)}); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		waitChanged(t, chs[i], contract, "watcher")
		if o, ok := w.Get(r.Name); !ok || *o.Capacity != 9 {
			t.Fatalf("watcher %d: %v, %v", i, o, ok)
		}
	}
}

// Overrides are stored durably with the queues: a restarted server still has them, a
// watcher started afterwards loads them, and a watcher that lived through the restart
// re-watches and sees changes made after it.
func TestOverridesSurviveServerRestart(t *testing.T) {
	t.Parallel()
	node, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)

	w := startWatcher(t, s, overrides.WatcherConfig{Backoff: 20 * time.Millisecond, ReconnectCheck: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	ch := w.Changed()
	if _, err := s.Apply(ctx, r, overrides.Patch{Outflow: rate(3, time.Second)}); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, ch, 5*time.Second, "watcher sees the first patch")
	if _, ok := w.Get(r.Name); !ok {
		t.Fatal("changed, but the first patch is not visible")
	}

	if err := node.Restart(); err != nil {
		t.Fatal(err)
	}

	// The stored override survived (retry while the client reconnects and JetStream recovers).
	var got overrides.Override
	waittest.Eventually(t, 20*time.Second, "override readable after restart", func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		o, ok, err := s.Get(c, r.Name)
		got = o
		return err == nil && ok
	})
	if *got.Outflow != *rate(3, time.Second) {
		t.Fatalf("after restart: %v", got)
	}

	// A watcher started after the restart (a restarted drainer) loads it.
	_, js2 := natstest.Connect(t, node.URL())
	s2, err := overrides.Open(ctx, js2, overrides.Config{Bucket: s.Bucket()})
	if err != nil {
		t.Fatal(err)
	}
	w2 := startWatcher(t, s2, overrides.WatcherConfig{})
	if o, ok := w2.Get(r.Name); !ok || *o.Outflow != *rate(3, time.Second) {
		t.Fatalf("new watcher after restart: %v, %v", o, ok)
	}

	// The watcher that lived through the restart sees a change made after it.
	waittest.Eventually(t, 20*time.Second, "patch after restart reaches the old watcher", func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := s.Apply(c, r, overrides.Patch{Capacity: i64(11)}); err != nil {
			return false
		}
		o, ok := w.Get(r.Name)
		return ok && o.Capacity != nil && *o.Capacity == 11
	})
	// From now on it is within the contract again.
	ch = w.Changed()
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(12)}); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, ch, contract, "patch after restart")
	if o, _ := w.Get(r.Name); *o.Capacity != 12 || *o.Outflow != *rate(3, time.Second) {
		t.Fatalf("old watcher after restart: %v", o)
	}
}

func TestWatcherStartStopTwice(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)

	never := overrides.NewWatcher(s, overrides.WatcherConfig{})
	never.Stop() // before Start
	never.Stop()

	w := overrides.NewWatcher(s, overrides.WatcherConfig{})
	if err := w.Start(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctxFor(t)); err != nil { // second Start: already synced
		t.Fatal(err)
	}
	w.Stop()
	w.Stop()

	// Start with a context that ends at once reports it, and Stop still returns.
	_, js := natstest.Connect(t, natstest.Start(t).URL())
	s2, err := overrides.Open(ctxFor(t), js, overrides.Config{Bucket: bucketName(t)})
	if err != nil {
		t.Fatal(err)
	}
	w2 := overrides.NewWatcher(s2, overrides.WatcherConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w2.Start(ctx); err == nil && !w2.Synced() {
		t.Fatal("Start with a cancelled context returned nil before syncing")
	}
	w2.Stop()
}

// Get runs before every claim of every drainer: it must not allocate.
func BenchmarkWatcherGet(b *testing.B) {
	_, _, s := newStore(b)
	r := testRule(b)
	if _, err := s.Apply(ctxFor(b), r, overrides.Patch{Capacity: i64(5)}); err != nil {
		b.Fatal(err)
	}
	w := startWatcher(b, s, overrides.WatcherConfig{})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := w.Get(r.Name); !ok {
			b.Fatal("no override")
		}
	}
}

// Effective copies and validates the rule when an override changes its queue: a few
// hundred nanoseconds next to a Redis round trip per claim.
func BenchmarkEffective(b *testing.B) {
	r := testRule(b)
	for _, bc := range []struct {
		name string
		o    overrides.Override
	}{
		{"none", overrides.Override{}},
		{"paused", overrides.Override{Paused: boolp(true)}},
		{"capacity", overrides.Override{Capacity: i64(5)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := overrides.Effective(r, bc.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
