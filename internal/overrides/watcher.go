package overrides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/rules"
)

// WatcherConfig configures a Watcher. Every field is optional; WithDefaults fills them in.
type WatcherConfig struct {
	// OnChange, when set, is called with a rule's name after its override changed (set,
	// changed or removed) and the change is visible through Get. It runs on the watcher's
	// goroutine and must return quickly (e.g. signal a channel). Use it for work that a
	// change triggers once, such as updating a stream's capacity; a loop that only needs
	// to wake up should select on Changed instead. Default nil.
	OnChange func(rule string)
	// Backoff is the first wait after a watch could not be set up (NATS down, JetStream
	// not ready after a restart); it doubles up to 5s. Default 100ms.
	Backoff time.Duration
	// ReconnectCheck is how often the watcher looks whether the NATS connection has
	// reconnected since the watch began. A restarted server has lost the ephemeral
	// consumer behind the watch, so the watcher then watches again from scratch.
	// Default 250ms.
	ReconnectCheck time.Duration
	// Resync re-watches from scratch this often even when nothing seems wrong, a cheap
	// guard against a watch that stalled silently. Default 5m; negative disables it.
	Resync time.Duration
	// Logger receives a line per change and per watch problem (throttled). Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns c with every unset field set to its default.
func (c WatcherConfig) WithDefaults() WatcherConfig {
	if c.Backoff <= 0 {
		c.Backoff = 100 * time.Millisecond
	}
	if c.ReconnectCheck <= 0 {
		c.ReconnectCheck = 250 * time.Millisecond
	}
	if c.Resync == 0 {
		c.Resync = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

const maxBackoff = 5 * time.Second

// errLogEvery throttles repeated watch errors: one line per this period while they last.
const errLogEvery = 10 * time.Second

// Watcher keeps every override in memory, up to date from a watch on the KV bucket.
// Get and Changed never block and never touch the network. It is safe for concurrent use.
type Watcher struct {
	store *Store
	cfg   WatcherConfig

	snap atomic.Pointer[snapshot]

	synced     chan struct{} // closed after the first complete read of the bucket
	syncedOnce sync.Once

	mu     sync.Mutex // guards cancel and done (Start/Stop)
	cancel context.CancelFunc
	done   chan struct{}
}

// snapshot is immutable once published; changed is closed when it is replaced.
type snapshot struct {
	m       map[string]Override
	changed chan struct{}
}

// NewWatcher returns a Watcher on s's bucket. It holds no overrides until Start.
func NewWatcher(s *Store, cfg WatcherConfig) *Watcher {
	w := &Watcher{store: s, cfg: cfg.WithDefaults(), synced: make(chan struct{})}
	w.snap.Store(&snapshot{m: map[string]Override{}, changed: make(chan struct{})})
	return w
}

// Get returns the current override of rule, and false when there is none. It reads an
// immutable snapshot through an atomic pointer: cheap enough for every claim.
func (w *Watcher) Get(rule string) (Override, bool) {
	o, ok := w.snap.Load().m[rule]
	return o, ok
}

// Effective returns r with its current override applied (see the package function
// Effective: on an invalid combination it returns r itself and the error) and the
// override, whose IsPaused the drainer checks.
func (w *Watcher) Effective(r *rules.Rule) (*rules.Rule, Override, error) {
	o, _ := w.Get(r.Name)
	eff, err := Effective(r, o)
	return eff, o, err
}

// All returns a copy of every current override by rule name.
func (w *Watcher) All() map[string]Override {
	return maps.Clone(w.snap.Load().m)
}

// Changed returns a channel that is closed at the next change of any override. Take the
// channel before reading, so a change in between is not missed:
//
//	ch := w.Changed()
//	o, _ := w.Get(rule)
//	select { case <-ch: /* read again */ case <-time.After(untilNextSlot): }
func (w *Watcher) Changed() <-chan struct{} { return w.snap.Load().changed }

// Synced reports whether the watcher has read the whole bucket at least once, i.e.
// whether Get reflects the stored overrides rather than none at all.
func (w *Watcher) Synced() bool {
	select {
	case <-w.synced:
		return true
	default:
		return false
	}
}

// Start begins watching and waits until every stored override has been read, so a
// drainer that starts does not run a paused rule for a moment. ctx bounds only that wait:
// the watcher runs until Stop. When ctx ends first, Start returns its error and the
// watcher keeps trying in the background (Get returns no overrides until it succeeds);
// the caller may log and go on with the rules file's values, or Stop. Calling Start
// again, even after Stop, only waits for the first sync.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.done == nil {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.cancel = cancel
		w.done = make(chan struct{})
		go w.run(runCtx)
	}
	w.mu.Unlock()
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("overrides: watcher not synced: %w", ctx.Err())
	}
}

// Stop ends the watch and waits for the watcher's goroutine. Get keeps returning the
// last overrides. Safe to call twice and before Start.
func (w *Watcher) Stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	if done == nil {
		// Never started: make a later Start a no-op that cannot leak a goroutine.
		w.done = make(chan struct{})
		close(w.done)
		w.cancel = func() {}
	}
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done != nil {
		<-done
	}
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	w.rewatch(ctx, w.watch)
}

// rewatch runs watch under Watcher's backoff and logger: see rewatch.
func (w *Watcher) rewatch(ctx context.Context, watch func(context.Context) (synced bool, err error)) {
	rewatch(ctx, w.cfg.Backoff, w.cfg.Logger, "overrides watch failed; retrying", w.store.Bucket(), watch)
}

// rewatch calls watch until ctx ends: again at once when it returns without an error (a
// deliberate re-watch), after a backoff when it fails. The backoff starts at first,
// doubles up to maxBackoff, and starts over once a watch completed a read of the bucket.
// Failures are logged as msg at most once per errLogEvery. watch is a parameter so that a
// test can run this timing in virtual time; Watcher and KeyIndex share it.
func rewatch(ctx context.Context, first time.Duration, log *slog.Logger, msg, bucket string, watch func(context.Context) (synced bool, err error)) {
	backoff := first
	var lastLog time.Time
	failures := 0
	for ctx.Err() == nil {
		synced, err := watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if synced {
			backoff, failures = first, 0
		}
		if err == nil {
			continue // a deliberate re-watch (reconnect, resync): at once
		}
		failures++
		if now := time.Now(); now.Sub(lastLog) >= errLogEvery {
			log.Warn(msg, "bucket", bucket, "err", err, "failures", failures, "backoff", backoff)
			lastLog = now
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// watch runs one KV watch: it reads every current value, publishes them as one snapshot,
// then applies changes one by one until the watch must be redone. It returns whether the
// initial read completed, and nil for a deliberate re-watch or an error for a failure.
func (w *Watcher) watch(ctx context.Context) (synced bool, err error) {
	nc := w.store.js.Conn()
	reconnects := nc.Stats().Reconnects

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Without IgnoreDeletes: a key whose last entry is a delete marker must remove the
	// override we hold. Without IncludeHistory: only each key's latest value matters.
	kw, err := w.store.kv.WatchAll(wctx)
	if err != nil {
		return false, fmt.Errorf("overrides: watch %s: %w", w.store.Bucket(), err)
	}
	defer func() { _ = kw.Stop() }()

	check := time.NewTicker(w.cfg.ReconnectCheck)
	defer check.Stop()
	var resync <-chan time.Time
	if w.cfg.Resync > 0 {
		t := time.NewTimer(w.cfg.Resync)
		defer t.Stop()
		resync = t.C
	}

	initial := map[string]Override{}
	for {
		select {
		case <-ctx.Done():
			return synced, nil
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				return synced, errors.New("overrides: watch closed")
			case e == nil: // every current value delivered
				if !synced {
					synced = true
					w.replace(initial)
					initial = nil
					w.syncedOnce.Do(func() { close(w.synced) })
				}
			case !synced:
				w.collect(initial, e)
			default:
				w.apply(e)
			}
		case <-check.C:
			if nc.IsClosed() {
				return synced, errors.New("overrides: NATS connection closed")
			}
			if n := nc.Stats().Reconnects; n != reconnects {
				w.cfg.Logger.Info("overrides: watching again after a NATS reconnect", "bucket", w.store.Bucket())
				return synced, nil
			}
		case <-resync:
			return synced, nil
		}
	}
}

// collect adds one entry of the initial read to m.
func (w *Watcher) collect(m map[string]Override, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, e.Key())
		return
	}
	o, err := decodeEntry(e)
	if err != nil {
		w.cfg.Logger.Error("unreadable override ignored; the rules file applies", "rule", e.Key(), "err", err)
		return
	}
	m[e.Key()] = o
}

// apply publishes one change.
func (w *Watcher) apply(e jetstream.KeyValueEntry) {
	cur := w.snap.Load()
	rule := e.Key()
	old, had := cur.m[rule]
	if e.Operation() != jetstream.KeyValuePut {
		if !had {
			return
		}
		next := maps.Clone(cur.m)
		delete(next, rule)
		w.publish(cur, next, []string{rule})
		w.cfg.Logger.Info("override removed", "rule", rule, "revision", e.Revision(), "previous", old)
		return
	}
	o, err := decodeEntry(e)
	if err != nil {
		// Keep what we had: the last readable intent of an operator beats none.
		w.cfg.Logger.Error("unreadable override ignored; keeping the previous one", "rule", rule, "err", err)
		return
	}
	if had && old.Revision == o.Revision {
		return
	}
	next := maps.Clone(cur.m)
	next[rule] = o
	w.publish(cur, next, []string{rule})
	w.cfg.Logger.Info("override changed", "rule", rule, "revision", o.Revision, "override", o, "previous", old)
}

// replace publishes a complete read of the bucket, notifying only when it differs from
// what we held (a resync that finds nothing new wakes nobody).
func (w *Watcher) replace(m map[string]Override) {
	cur := w.snap.Load()
	var changed []string
	for rule, o := range m {
		if old, ok := cur.m[rule]; !ok || old.Revision != o.Revision {
			changed = append(changed, rule)
			w.cfg.Logger.Info("override loaded", "rule", rule, "revision", o.Revision, "override", o)
		}
	}
	for rule, old := range cur.m {
		if _, ok := m[rule]; !ok {
			changed = append(changed, rule)
			w.cfg.Logger.Info("override removed", "rule", rule, "previous", old)
		}
	}
	if len(changed) == 0 {
		return
	}
	w.publish(cur, m, changed)
}

// publish swaps in the new snapshot, then wakes everyone waiting on the old one. Only
// the watcher's goroutine publishes, so load-then-store needs no compare-and-swap.
func (w *Watcher) publish(cur *snapshot, m map[string]Override, changed []string) {
	w.snap.Store(&snapshot{m: m, changed: make(chan struct{})})
	close(cur.changed)
	if w.cfg.OnChange != nil {
		for _, rule := range changed {
			w.cfg.OnChange(rule)
		}
	}
}
