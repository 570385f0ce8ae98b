package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/breaker"
	"github.com/sluice-io/sluice/internal/rules"
)

// ErrStopped is returned by Start after the Drainer was stopped: a Drainer runs once.
var ErrStopped = errors.New("drain: drainer already stopped")

// Delivery defaults, used when a rule leaves them unset (the rules loader normally fills them).
const (
	defaultMaxAttempts = 8
	defaultSinkTimeout = 10 * time.Second
	// postTimeout bounds the bookkeeping after a delivery (delete, release, dead letters); it
	// runs even during a hard stop, so a message the sink accepted is not delivered again.
	postTimeout = 5 * time.Second
)

// Drainer drains every queue rule: it claims due keys (Scheduler), pops each key's head
// (Queues), delivers it through the Sink and deletes it once the sink accepted it.
//
// Lifecycle: New, Start(ctx), Stop. Stop is a soft stop: no more claims, in-flight deliveries
// finish (for up to Config.StopTimeout, then they are cancelled and stay queued). Cancelling
// the ctx given to Start is a hard stop: in-flight deliveries are cancelled at once. Start and
// Stop are safe to call twice and from several goroutines.
type Drainer struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	// brkM are the sink breakers' collectors (own engine), registered once per Drainer.
	brkM *breaker.Metrics

	mu       sync.Mutex
	started  bool
	soft     chan struct{} // closed by Stop: stop claiming
	softOnce sync.Once
	done     chan struct{} // closed when everything has stopped
	runCtx   context.Context
	cancel   context.CancelFunc

	loops    sync.WaitGroup // rules manager, claimers, maintenance
	inflight sync.WaitGroup // deliveries
	renewers sync.WaitGroup // lease renewal loops (one per rule)
	flushed  chan struct{}  // closed once every delivery has finished: renewals stop

	claimersMu sync.Mutex
	claimers   map[string]*claimer

	// The own engine's rules (own.go), and removed rules whose partitions are still to be
	// given up at the next renewal.
	ownMu       sync.Mutex
	orules      map[string]*orule
	ownLeaving  []string
	ownAnnounce bool        // the first renewal (ownLoop's goroutine only)
	dropNotices atomic.Bool // tests: every notice is lost (DropNotices)

	redisDown  atomic.Bool
	redisLog   throttle
	slotSeq    atomic.Uint64 // names each sink.max_in_flight slot this drainer takes
	natsLog    throttle
	releaseLog throttle
	// ownMismatchLog: -own-partitions differs from the other drainers' (own_lease.go).
	ownMismatchLog throttle
	// sig: the test signals (testsignals.go); nil in production.
	sig *testSignals
}

// New returns a Drainer; cfg is completed with WithDefaults and validated.
func New(cfg Config) (*Drainer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("drain: metrics: %w", err)
	}
	brkM, err := breakerMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("drain: metrics: %w", err)
	}
	d := &Drainer{
		brkM:           brkM,
		cfg:            cfg,
		log:            cfg.Logger.With("drainer", cfg.Owner),
		m:              m,
		soft:           make(chan struct{}),
		flushed:        make(chan struct{}),
		done:           make(chan struct{}),
		claimers:       map[string]*claimer{},
		orules:         map[string]*orule{},
		redisLog:       throttle{every: 30 * time.Second},
		natsLog:        throttle{every: 30 * time.Second},
		releaseLog:     throttle{every: 30 * time.Second},
		ownMismatchLog: throttle{every: 30 * time.Second},
	}
	return d, nil
}

// Owner is the id this drainer claims keys under.
func (d *Drainer) Owner() string { return d.cfg.Owner }

// Start starts draining in background goroutines and returns at once. Cancelling ctx is a
// hard stop. Calling Start again does nothing; after a stop it returns ErrStopped.
func (d *Drainer) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.done:
		return ErrStopped
	default:
	}
	if d.started {
		return nil
	}
	d.started = true
	d.runCtx, d.cancel = context.WithCancel(ctx)
	d.loops.Add(2)
	d.m.running.Inc()
	if d.cfg.Engine == EngineOwn {
		go d.manageOwn()
	} else {
		go d.manage()
	}
	go d.maintain()
	go d.waitStop()
	if d.cfg.Engine == EngineClaim {
		// Once per drainer: the claim engine stays selectable for this release only, so a
		// deployment can cut over (docs/operations.md "Cutting over to the own engine").
		d.log.Warn("engine claim is deprecated and will be removed in a later release: cut over to -engine own (stop every claim drainer, then start own ones)", "engine", EngineClaim)
	}
	d.log.Info("drainer started", "engine", d.cfg.Engine, "workers_per_rule", d.cfg.Workers, "lookahead", d.cfg.Lookahead, "lease", d.cfg.Lease, "lease_renew", d.cfg.LeaseRenew)
	return nil
}

// Stop stops claiming, waits for in-flight deliveries (at most Config.StopTimeout, then
// cancels them) and returns when everything has stopped. Safe to call twice, and before
// Start (then it only prevents a later Start).
func (d *Drainer) Stop() {
	d.softOnce.Do(func() { close(d.soft) })
	d.mu.Lock()
	started := d.started
	if !started {
		select {
		case <-d.done:
		default:
			close(d.done)
		}
	}
	d.mu.Unlock()
	<-d.done
}

// Done is closed once the drainer has stopped (soft or hard).
func (d *Drainer) Done() <-chan struct{} { return d.done }

// waitStop finishes a soft or hard stop.
func (d *Drainer) waitStop() {
	hard := false
	select {
	case <-d.soft:
	case <-d.runCtx.Done():
		hard = true
	}
	d.loops.Wait() // no more claims after this
	flushed := make(chan struct{})
	go func() { d.inflight.Wait(); close(flushed) }()
	if !hard {
		t := time.NewTimer(d.cfg.StopTimeout)
		select {
		case <-flushed:
		case <-t.C:
			d.log.Warn("stop timeout: cancelling in-flight deliveries (they stay queued)", "timeout", d.cfg.StopTimeout)
		case <-d.runCtx.Done():
		}
		t.Stop()
	}
	d.cancel()
	<-flushed
	close(d.flushed)
	d.renewers.Wait()
	d.log.Info("drainer stopped", "hard", hard)
	d.m.running.Dec()
	close(d.done)
}

// stopping is closed (readable) once claiming must stop.
func (d *Drainer) stopping() bool {
	select {
	case <-d.soft:
		return true
	case <-d.runCtx.Done():
		return true
	default:
		return false
	}
}

const (
	deliveryRunning int32 = iota
	deliveryReturned
	deliveryAbandoned
)

// errLeaseLost cancels a delivery whose claim was lost.
var errLeaseLost = errors.New("drain: claim lease lost: another drainer may deliver this key")

// manage keeps one claimer per queue rule, following Config.Rules.
func (d *Drainer) manage() {
	defer d.loops.Done()
	var claimLoops sync.WaitGroup
	defer claimLoops.Wait()
	defer func() {
		d.claimersMu.Lock()
		for name, c := range d.claimers {
			close(c.quit)
			delete(d.claimers, name)
		}
		d.claimersMu.Unlock()
	}()
	t := time.NewTicker(d.cfg.RulesEvery)
	defer t.Stop()
	for {
		seen := map[string]bool{}
		for _, r := range d.cfg.Rules() {
			if r == nil || !r.HasQueue() {
				continue
			}
			seen[r.Name] = true
			d.claimersMu.Lock()
			c, ok := d.claimers[r.Name]
			if !ok {
				c = newClaimer(r.Name, d.cfg.Workers, d.cfg.MaxClaimed)
				d.claimers[r.Name] = c
			}
			c.rule.Store(r)
			d.claimersMu.Unlock()
			if !ok {
				claimLoops.Add(1)
				d.renewers.Add(1)
				go func() { defer claimLoops.Done(); d.claimLoop(c) }()
				go func() { defer d.renewers.Done(); d.renewLoop(c) }()
				d.log.Info("draining rule", "rule", r.Name)
				if opts := SteeringOptions(r); len(opts) > 0 {
					// Once per rule, when its draining starts: the claim engine has no
					// per-key pacing in memory to apply them to.
					d.log.Warn("rule uses steering options the claim engine does not apply: run the drainers with -engine own",
						"rule", r.Name, "options", opts, "engine", EngineClaim)
				}
			}
		}
		d.claimersMu.Lock()
		for name, c := range d.claimers {
			if !seen[name] {
				close(c.quit)
				delete(d.claimers, name)
				d.m.depth.DeleteLabelValues(name)
				d.log.Info("rule gone: no longer draining it", "rule", name)
			}
		}
		d.claimersMu.Unlock()
		d.sig.Raise(evRulesPolled)
		select {
		case <-t.C:
		case <-d.soft:
			return
		case <-d.runCtx.Done():
			return
		}
	}
}

// breakerSets holds one breaker.Metrics per Registerer: several drainers in one process
// (tests, `sluice dev`) share the collectors, registered once.
var breakerSets sync.Map // prometheus.Registerer → *breaker.Metrics

func breakerMetrics(reg prometheus.Registerer) (*breaker.Metrics, error) {
	if reg == nil {
		return breaker.NewMetrics(), nil
	}
	if m, ok := breakerSets.Load(reg); ok {
		return m.(*breaker.Metrics), nil
	}
	m := breaker.NewMetrics()
	if got, loaded := breakerSets.LoadOrStore(reg, m); loaded {
		return got.(*breaker.Metrics), nil
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				breakerSets.Delete(reg)
				return nil, err
			}
		}
	}
	return m, nil
}

// SteeringOptions lists the options of r that only the own engine applies (per-key
// overrides aside): delivery.spacing strict, delivery.window, delivery.adaptive,
// sink.breaker.
func SteeringOptions(r *rules.Rule) []string {
	var out []string
	if r.Delivery.Spacing == rules.SpacingStrict {
		out = append(out, "delivery.spacing")
	}
	if r.Delivery.Window.Set {
		out = append(out, "delivery.window")
	}
	if r.Delivery.Adaptive.Enabled {
		out = append(out, "delivery.adaptive")
	}
	if r.Sink.Breaker.Enabled {
		out = append(out, "sink.breaker")
	}
	return out
}
