package overrides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/window"
)

// Sources Effective names.
const (
	SourceRule         = "rule"          // the rules file's value
	SourceRuleOverride = "rule override" // PATCH /v1/admin/queues/{name}
	SourceKeyOverride  = "key override"  // PATCH /v1/admin/queues/{name}/keys/{key}; "key override until <RFC 3339>" with an end
)

// KeyIndexConfig configures a KeyIndex. Every field is optional.
type KeyIndexConfig struct {
	// Rules is the rule-level watcher, so Effective can say "rule override". Default nil:
	// only the rule and key overrides are considered.
	Rules *Watcher
	// OnChange, when set, is called with (rule, key) after the key's override changed and
	// the change is visible through Lookup; key is "" after a complete re-read (every key
	// of rule may have changed). It runs on the index's goroutine and must return quickly.
	OnChange func(rule, key string)
	// SweepEvery is how often the sweeper deletes overrides that have ended and those of
	// rules that are gone. Default 1m; negative: no sweeper (a reader still treats an
	// ended override as absent).
	SweepEvery time.Duration
	// RulesCheck is how often the sweeper looks whether the rules set changed, so that
	// the overrides of a removed rule go within about this long. Default 1s.
	RulesCheck time.Duration
	// CurrentRules returns the rules in force, for the sweeper; nil: no removal with the rule.
	CurrentRules func() *rules.Set
	// ReconnectCheck and Backoff as in WatcherConfig. Defaults 250ms and 100ms.
	ReconnectCheck time.Duration
	Backoff        time.Duration
	// Registerer, when set, receives sluice_key_overrides (gauge) and
	// sluice_key_overrides_swept_total (counter by reason).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

func (c KeyIndexConfig) withDefaults() KeyIndexConfig {
	if c.SweepEvery == 0 {
		c.SweepEvery = time.Minute
	}
	if c.RulesCheck <= 0 {
		c.RulesCheck = time.Second
	}
	if c.ReconnectCheck <= 0 {
		c.ReconnectCheck = 250 * time.Millisecond
	}
	if c.Backoff <= 0 {
		c.Backoff = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// KeyIndex holds every per-key override in memory, kept current by a watch on the
// key-override bucket (changes arrive within milliseconds on every process), and runs
// the sweeper. Lookup and Effective never touch the network.
//
// Unlike Watcher it is not a copy-on-write snapshot: with 100,000 overrides, copying the
// map for each of 10,000 bulk writes would cost seconds. A read lock around two map
// lookups is O(1) and allocation-free; the writer holds the lock only per change.
type KeyIndex struct {
	store *KeyStore
	cfg   KeyIndexConfig

	mu      sync.RWMutex
	m       map[string]map[string]KeyOverride // rule → key → override
	n       int
	changed chan struct{}

	synced     chan struct{}
	syncedOnce sync.Once

	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}

	gauge prometheus.Gauge
	swept *prometheus.CounterVec

	sweepMu sync.Mutex // one Sweep at a time; guards sw
	sw      *sweeper

	subMu  sync.Mutex
	subs   map[int]func(rule, key string)
	subSeq int
}

// Subscribe calls fn with (rule, key) after each change of a key's override is visible
// through Lookup — key "" after a complete re-read (any key of rule may have changed). fn
// runs on the index's goroutine and must return quickly (e.g. mark the key for re-pacing
// and signal a channel). A pacing engine uses it to re-time one key at once instead of
// re-reading every key on Changed. stop ends the subscription.
func (x *KeyIndex) Subscribe(fn func(rule, key string)) (stop func()) {
	x.subMu.Lock()
	defer x.subMu.Unlock()
	if x.subs == nil {
		x.subs = map[int]func(rule, key string){}
	}
	x.subSeq++
	id := x.subSeq
	x.subs[id] = fn
	return func() {
		x.subMu.Lock()
		delete(x.subs, id)
		x.subMu.Unlock()
	}
}

func (x *KeyIndex) notify(rule, key string) {
	if x.cfg.OnChange != nil {
		x.cfg.OnChange(rule, key)
	}
	x.subMu.Lock()
	defer x.subMu.Unlock()
	for _, fn := range x.subs {
		fn(rule, key)
	}
}

// NewKeyIndex returns an index on s; Start fills it.
func NewKeyIndex(s *KeyStore, cfg KeyIndexConfig) *KeyIndex {
	cfg = cfg.withDefaults()
	x := &KeyIndex{store: s, cfg: cfg, m: map[string]map[string]KeyOverride{},
		changed: make(chan struct{}), synced: make(chan struct{}), sw: newSweeper(s.cfg.Clock())}
	x.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_key_overrides",
		Help: "Per-key overrides this process holds (including ended ones the sweeper has not deleted yet)."})
	x.swept = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_key_overrides_swept_total",
		Help: "Per-key overrides the sweeper deleted, by reason (expired: their until passed; rule_removed)."}, []string{"reason"})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{x.gauge, x.swept} {
			if err := cfg.Registerer.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					cfg.Logger.Warn("key overrides: metric not registered", "err", err)
				}
			}
		}
	}
	return x
}

// Store is the store the index watches.
func (x *KeyIndex) Store() *KeyStore { return x.store }

// Lookup returns key's override in rule when one is in force now (by the store's clock):
// an override whose end has passed reads as absent. O(1), no allocation; safe to call
// for every delivery.
func (x *KeyIndex) Lookup(rule, key string) (KeyOverride, bool) {
	return x.LookupAt(rule, key, x.store.cfg.Clock())
}

// LookupAt is Lookup at a given time (a pacing loop that has read the clock already).
func (x *KeyIndex) LookupAt(rule, key string, now time.Time) (KeyOverride, bool) {
	x.mu.RLock()
	o, ok := x.m[rule][key]
	x.mu.RUnlock()
	if !ok || !o.Active(now) {
		return KeyOverride{}, false
	}
	return o, true
}

// Len is how many overrides the index holds (ended ones not yet swept included).
func (x *KeyIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.n
}

// Keys returns the overrides of rule in force at now, by key (a copy).
func (x *KeyIndex) Keys(rule string, now time.Time) map[string]KeyOverride {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[string]KeyOverride, len(x.m[rule]))
	for k, o := range x.m[rule] {
		if o.Active(now) {
			out[k] = o
		}
	}
	return out
}

// Effective returns key's outflow in rule (per second), whether the key is paused, and
// where that comes from: "key override" (with " until <RFC 3339>" when it ends), "rule
// override" or "rule". A rule paused by its override pauses every key. A key override's
// outflow replaces the rule's per-key outflow; the rule's total_outflow still caps the
// sum over all keys (the drainer's job). It allocates only for a key override with an end.
func (x *KeyIndex) Effective(rule rules.Rule, key string, now time.Time) (outflow float64, paused bool, source string) {
	var ro Override
	if x.cfg.Rules != nil {
		ro, _ = x.cfg.Rules.Get(rule.Name)
	}
	ko, ok := x.LookupAt(rule.Name, key, now)
	return EffectiveKey(&rule, ro, ko, ok)
}

// EffectiveKey is KeyIndex.Effective from given overrides: ro of the rule, ko of the key
// (has: whether ko is in force). The admin API uses it with what it just wrote.
func EffectiveKey(rule *rules.Rule, ro Override, ko KeyOverride, has bool) (outflow float64, paused bool, source string) {
	source = SourceRule
	if rule.Queue != nil {
		outflow = rule.Queue.Outflow.PerSecond()
	}
	if ro.Outflow != nil {
		outflow, source = ro.Outflow.PerSecond(), SourceRuleOverride
	}
	if ro.IsPaused() {
		paused, source = true, SourceRuleOverride
	}
	if !has || (ko.Outflow.Zero() && !ko.Paused) { // a window alone: see EffectiveWindow
		return outflow, paused, source
	}
	if !ko.Outflow.Zero() {
		outflow = ko.Outflow.PerSecond()
	}
	if paused && !ko.Paused {
		return outflow, paused, source // the rule's pause decides
	}
	paused = paused || ko.Paused
	source = SourceKeyOverride
	if !ko.Until.IsZero() {
		source += " until " + ko.Until.UTC().Format(time.RFC3339)
	}
	return outflow, paused, source
}

// EffectiveWindow returns when key's deliveries may happen and where that comes from:
// the key override's window ("key override", with " until <RFC 3339>" when it ends) or
// the rule's delivery.window ("rule"; not Set: always). ko and has as in EffectiveKey.
func EffectiveWindow(rule *rules.Rule, ko KeyOverride, has bool) (w window.Window, source string) {
	if has && ko.Window != nil {
		source = SourceKeyOverride
		if !ko.Until.IsZero() {
			source += " until " + ko.Until.UTC().Format(time.RFC3339)
		}
		return *ko.Window, source
	}
	return rule.Delivery.Window, SourceRule
}

// Changed returns a channel closed at the next change of any key override. Take it
// before reading, as with Watcher.Changed.
func (x *KeyIndex) Changed() <-chan struct{} {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.changed
}

// Synced reports whether the whole bucket has been read once.
func (x *KeyIndex) Synced() bool {
	select {
	case <-x.synced:
		return true
	default:
		return false
	}
}

// Start begins watching (and sweeping) and waits until every stored override is read;
// ctx bounds only that wait, as with Watcher.Start.
func (x *KeyIndex) Start(ctx context.Context) error {
	x.startOnce.Do(func() {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		x.cancel, x.done = cancel, make(chan struct{})
		go func() {
			defer close(x.done)
			var wg sync.WaitGroup
			if x.cfg.SweepEvery > 0 {
				wg.Go(func() { x.sweepLoop(runCtx) })
			}
			x.watchLoop(runCtx)
			wg.Wait()
		}()
	})
	select {
	case <-x.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("overrides: key index not synced: %w", ctx.Err())
	}
}

// Stop ends the watch and the sweeper. Lookup keeps answering the last overrides.
func (x *KeyIndex) Stop() {
	x.startOnce.Do(func() {})
	if x.cancel != nil {
		x.cancel()
		<-x.done
	}
}

func (x *KeyIndex) watchLoop(ctx context.Context) {
	rewatch(ctx, x.cfg.Backoff, x.cfg.Logger, "key overrides watch failed; retrying", x.store.Bucket(), x.watch)
}

// watch is Watcher.watch for keys: a complete read replaces the index, then changes
// apply one by one; a NATS reconnect ends it for a fresh read (the ephemeral consumer
// behind the watch is gone after a server restart, and deletes may have been missed).
func (x *KeyIndex) watch(ctx context.Context) (synced bool, err error) {
	nc := x.store.js.Conn()
	reconnects := nc.Stats().Reconnects
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kw, err := x.store.kv.WatchAll(wctx)
	if err != nil {
		return false, fmt.Errorf("overrides: watch %s: %w", x.store.Bucket(), err)
	}
	defer func() { _ = kw.Stop() }()
	check := time.NewTicker(x.cfg.ReconnectCheck)
	defer check.Stop()
	initial := map[string]map[string]KeyOverride{}
	n := 0
	for {
		select {
		case <-ctx.Done():
			return synced, nil
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				return synced, errors.New("overrides: key watch closed")
			case e == nil:
				if !synced {
					synced = true
					x.replace(initial, n)
					initial = nil
					x.syncedOnce.Do(func() { close(x.synced) })
				}
			case !synced:
				rule, key, o, put, ok := x.decode(e)
				if !ok {
					continue
				}
				if !put {
					if _, had := initial[rule][key]; had {
						delete(initial[rule], key)
						n--
					}
					continue
				}
				if initial[rule] == nil {
					initial[rule] = map[string]KeyOverride{}
				}
				if _, had := initial[rule][key]; !had {
					n++
				}
				initial[rule][key] = o
			default:
				if rule, key, o, put, ok := x.decode(e); ok {
					x.apply(rule, key, o, put)
				}
			}
		case <-check.C:
			if nc.IsClosed() {
				return synced, errors.New("overrides: NATS connection closed")
			}
			if nc.Stats().Reconnects != reconnects {
				return synced, nil
			}
		}
	}
}

func (x *KeyIndex) decode(e jetstream.KeyValueEntry) (rule, key string, o KeyOverride, put, ok bool) {
	rule, key, ok = splitKVKey(e.Key())
	if !ok {
		x.cfg.Logger.Warn("key overrides: entry with an unknown key ignored", "kv_key", e.Key())
		return "", "", KeyOverride{}, false, false
	}
	if e.Operation() != jetstream.KeyValuePut {
		return rule, key, KeyOverride{}, false, true
	}
	o, err := decodeKeyOverride(e.Value())
	if err != nil {
		x.cfg.Logger.Error("unreadable key override ignored; the rule applies", "rule", rule, "key", key, "err", err)
		return rule, key, KeyOverride{}, false, true
	}
	o.Revision = e.Revision()
	return rule, key, o, true, true
}

func (x *KeyIndex) apply(rule, key string, o KeyOverride, put bool) {
	x.mu.Lock()
	km := x.m[rule]
	_, had := km[key]
	switch {
	case put:
		if km == nil {
			km = map[string]KeyOverride{}
			x.m[rule] = km
		}
		km[key] = o
		if !had {
			x.n++
		}
	case had:
		delete(km, key)
		x.n--
		if len(km) == 0 {
			delete(x.m, rule)
		}
	default:
		x.mu.Unlock()
		return
	}
	ch := x.changed
	x.changed = make(chan struct{})
	n := x.n
	x.mu.Unlock()
	close(ch)
	x.gauge.Set(float64(n))
	x.notify(rule, key)
}

func (x *KeyIndex) replace(m map[string]map[string]KeyOverride, n int) {
	x.mu.Lock()
	old := x.m
	x.m, x.n = m, n
	ch := x.changed
	x.changed = make(chan struct{})
	x.mu.Unlock()
	close(ch)
	x.gauge.Set(float64(n))
	for rule := range old {
		if _, ok := m[rule]; !ok {
			x.notify(rule, "")
		}
	}
	for rule := range m {
		x.notify(rule, "")
	}
}

// sweepLoop deletes overrides that have ended (every SweepEvery) and those of rules
// that left the rules set (within RulesCheck of the change).
func (x *KeyIndex) sweepLoop(ctx context.Context) {
	select {
	case <-x.synced:
	case <-ctx.Done():
		return
	}
	var lastSet *rules.Set
	lastFull := time.Time{}
	tick := time.NewTicker(x.cfg.RulesCheck)
	defer tick.Stop()
	lastMarkers := time.Now()
	for {
		var set *rules.Set
		if x.cfg.CurrentRules != nil {
			set = x.cfg.CurrentRules()
		}
		now := time.Now()
		if set != lastSet || now.Sub(lastFull) >= x.cfg.SweepEvery {
			sctx, cancel := context.WithTimeout(ctx, x.cfg.SweepEvery+30*time.Second)
			x.Sweep(sctx, set)
			cancel()
			lastSet, lastFull = set, now
		}
		if now.Sub(lastMarkers) >= time.Hour {
			// Purge markers of deletes older than an hour: a watcher away that long has
			// re-read the bucket from scratch anyway.
			mctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := x.store.purgeMarkers(mctx, time.Hour); err != nil && ctx.Err() == nil {
				x.cfg.Logger.Warn("key overrides: delete markers not purged", "err", err)
			}
			cancel()
			lastMarkers = now
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweeper remembers since when each rule has been missing from the rules set.
type sweeper struct {
	started time.Time
	seen    map[string]bool
	absent  map[string]time.Time
}

func newSweeper(now time.Time) *sweeper {
	return &sweeper{started: now, seen: map[string]bool{}, absent: map[string]time.Time{}}
}

// Sweep deletes, with a compare-and-set on each entry's revision (a renewed override is
// never deleted), the overrides that have ended by the store's clock and, when set is
// not nil, those of rules missing from set that were written before the rule went
// missing. "Before" keeps a process with an older rules file (a rolling deploy) from
// deleting the overrides of a rule added elsewhere after it loaded its rules; a rule
// missing since this process started counts as missing since then. Every process runs
// it; two sweeping at once delete each entry once.
func (x *KeyIndex) Sweep(ctx context.Context, set *rules.Set) (expired, removed int) {
	x.sweepMu.Lock()
	defer x.sweepMu.Unlock()
	sw := x.sw
	now := x.store.cfg.Clock()
	if set != nil {
		for _, r := range set.QueueRules() {
			sw.seen[r.Name] = true
			delete(sw.absent, r.Name)
		}
		for name := range sw.seen {
			if set.Rule(name) == nil || !set.Rule(name).HasQueue() {
				if _, ok := sw.absent[name]; !ok {
					sw.absent[name] = now
				}
			}
		}
	}
	type victim struct {
		k      string
		rev    uint64
		reason string
	}
	var victims []victim
	x.mu.RLock()
	for rule, km := range x.m {
		gone := false
		var since time.Time
		if set != nil {
			if r := set.Rule(rule); r == nil || !r.HasQueue() {
				gone = true
				since = sw.started
				if t, ok := sw.absent[rule]; ok {
					since = t
				}
			}
		}
		for key, o := range km {
			switch {
			case gone && o.UpdatedAt.Before(since):
				victims = append(victims, victim{KeyKVKey(rule, key), o.Revision, "rule_removed"})
			case !o.Active(now):
				victims = append(victims, victim{KeyKVKey(rule, key), o.Revision, "expired"})
			}
		}
	}
	x.mu.RUnlock()
	for _, v := range victims {
		if ctx.Err() != nil {
			break
		}
		if err := x.store.deleteIf(ctx, v.k, v.rev); err != nil {
			x.cfg.Logger.Warn("key overrides: sweep delete failed", "kv_key", v.k, "err", err)
			continue
		}
		x.swept.WithLabelValues(v.reason).Inc()
		if v.reason == "expired" {
			expired++
		} else {
			removed++
		}
	}
	if expired+removed > 0 {
		x.cfg.Logger.Info("key overrides swept", "expired", expired, "rule_removed", removed)
	}
	return expired, removed
}
