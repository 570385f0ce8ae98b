package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// ErrStopped is returned by Start after the Drainer was stopped: a Drainer runs once.
var ErrStopped = errors.New("drain: drainer already stopped")

// Delivery defaults, used when a rule leaves them unset (the rules loader normally fills them).
const (
	defaultMaxAttempts = 8
	defaultMinBackoff  = time.Second
	defaultMaxBackoff  = 5 * time.Minute
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

	redisDown  atomic.Bool
	redisLog   throttle
	natsLog    throttle
	releaseLog throttle
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
	d := &Drainer{
		cfg:        cfg,
		log:        cfg.Logger.With("drainer", cfg.Owner),
		m:          m,
		soft:       make(chan struct{}),
		flushed:    make(chan struct{}),
		done:       make(chan struct{}),
		claimers:   map[string]*claimer{},
		redisLog:   throttle{every: 30 * time.Second},
		natsLog:    throttle{every: 30 * time.Second},
		releaseLog: throttle{every: 30 * time.Second},
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
	go d.manage()
	go d.maintain()
	go d.waitStop()
	d.log.Info("drainer started", "workers_per_rule", d.cfg.Workers, "lookahead", d.cfg.Lookahead, "lease", d.cfg.Lease, "lease_renew", d.cfg.LeaseRenew)
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

// claimer claims the keys of one rule. Each rule has its own claim tokens and workers, so a
// rule whose sink hangs holds only its own: other rules' outflow goes on.
type claimer struct {
	name    string
	rule    atomic.Pointer[rules.Rule]
	wake    chan struct{} // cap 1: a release asked for an earlier claim
	wakeAt  atomic.Int64  // unix µs (local clock) of the earliest claim a release asked for (0 = none)
	quit    chan struct{} // closed when the rule disappears
	tokens  chan struct{} // one per key this rule may still claim (MaxClaimed)
	workers chan struct{} // one per idle worker of this rule (Workers)
	// offset is Redis's clock minus the local clock (µs), measured at the last claim or
	// renewal: times in Redis (slots, retry times) are converted with it.
	offset atomic.Int64
	active atomic.Int64 // deliveries (handle) running

	mu      sync.Mutex
	pending []queue.Release // finished keys, handed back with the next claim
	closed  bool            // the claim loop ended: release directly
	held    map[*heldKey]struct{}
}

func newClaimer(name string, workers, maxClaimed int) *claimer {
	c := &claimer{name: name, wake: make(chan struct{}, 1), quit: make(chan struct{}),
		tokens: make(chan struct{}, maxClaimed), workers: make(chan struct{}, workers),
		held: map[*heldKey]struct{}{}}
	for range maxClaimed {
		c.tokens <- struct{}{}
	}
	for range workers {
		c.workers <- struct{}{}
	}
	return c
}

// heldKey is one claim this drainer holds, from the claim until its release is queued.
type heldKey struct {
	key   string
	fence int64
	// validUntil (local unix µs): the lease surely lasts until then (start of the last
	// successful claim or renewal + Lease). Past it, without a renewal, the key may be gone.
	validUntil atomic.Int64
	// renewUntil (local unix µs): no renewal after this (a delivery that ignores its
	// deadline: let another drainer take the key). 0 = no limit.
	renewUntil atomic.Int64
	lost       atomic.Bool
	// delivery is deliveryRunning until the sink returns (deliveryReturned) or the watchdog
	// gives up on it, LeaseRenew after its deadline, and gives the worker back
	// (deliveryAbandoned; see deliverHead). Whoever swaps first decides.
	delivery atomic.Int32

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the delivery in flight, if any
}

const (
	deliveryRunning int32 = iota
	deliveryReturned
	deliveryAbandoned
)

// errLeaseLost cancels a delivery whose claim was lost.
var errLeaseLost = errors.New("drain: claim lease lost: another drainer may deliver this key")

// markLost records that the claim is gone and cancels its delivery in flight.
func (h *heldKey) markLost() bool {
	if h.lost.Swap(true) {
		return false
	}
	h.mu.Lock()
	if h.cancel != nil {
		h.cancel(errLeaseLost)
	}
	h.mu.Unlock()
	return true
}

// ok reports whether the claim is surely still ours at local time now.
func (h *heldKey) ok(now time.Time) bool {
	return !h.lost.Load() && now.UnixMicro() < h.validUntil.Load()
}

func (c *claimer) hold(h *heldKey) {
	c.mu.Lock()
	c.held[h] = struct{}{}
	c.mu.Unlock()
}

func (c *claimer) holds(h *heldKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[h]
	return ok
}

func (c *claimer) unhold(h *heldKey) {
	c.mu.Lock()
	delete(c.held, h)
	c.mu.Unlock()
}

// toLocal converts a time of Redis's clock to the local clock; toRedis the other way.
func (c *claimer) toLocal(t time.Time) time.Time {
	return t.Add(-time.Duration(c.offset.Load()) * time.Microsecond)
}

func (c *claimer) toRedis(t time.Time) time.Time {
	return t.Add(time.Duration(c.offset.Load()) * time.Microsecond)
}

// addRelease queues rel for the next claim; false when the loop has ended and the caller
// must release it itself.
func (c *claimer) addRelease(rel queue.Release) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.pending = append(c.pending, rel)
	return true
}

func (c *claimer) takeReleases() []queue.Release {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending
	c.pending = nil
	return p
}

// putBack returns releases whose claim call failed, to go with the next one. Applying a
// release twice is harmless: the second finds the key no longer held and changes nothing.
func (c *claimer) putBack(rels []queue.Release) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(rels, c.pending...)
}

// close ends batching and returns what is still pending.
func (c *claimer) close() []queue.Release {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	p := c.pending
	c.pending = nil
	return p
}

// wakeBy asks the claimer to claim again by t - lookahead (a key it released is due at t).
func (c *claimer) wakeBy(t time.Time) {
	v := t.UnixMicro()
	for {
		old := c.wakeAt.Load()
		if old != 0 && old <= v {
			break
		}
		if c.wakeAt.CompareAndSwap(old, v) {
			break
		}
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

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
		select {
		case <-t.C:
		case <-d.soft:
			return
		case <-d.runCtx.Done():
			return
		}
	}
}

func sinkTimeout(r *rules.Rule) time.Duration {
	if r.Sink.Timeout > 0 {
		return r.Sink.Timeout
	}
	return defaultSinkTimeout
}

// takeTokens waits for one of the rule's claim tokens and takes up to want more without
// waiting.
func (d *Drainer) takeTokens(c *claimer, want int) int {
	select {
	case <-c.tokens:
	case <-c.quit:
		return 0
	case <-d.soft:
		return 0
	case <-d.runCtx.Done():
		return 0
	}
	n := 1
	for n < want {
		select {
		case <-c.tokens:
			n++
			continue
		default:
		}
		break
	}
	if n >= (want+1)/2 {
		return n
	}
	// Saturated: claims are limited by keys finishing one by one. Wait a moment for half a
	// batch, so one round trip claims (and releases) many keys instead of one per message.
	t := time.NewTimer(d.cfg.Lookahead / 20)
	defer t.Stop()
	for n < (want+1)/2 {
		select {
		case <-c.tokens:
			n++
		case <-t.C:
			return n
		case <-c.quit:
			return n
		case <-d.soft:
			return n
		case <-d.runCtx.Done():
			return n
		}
	}
	return n
}

func (d *Drainer) giveTokens(c *claimer, n int) {
	for i := 0; i < n; i++ {
		c.tokens <- struct{}{}
	}
}

// claimLoop claims due keys of one rule and hands each to a delivery goroutine. Keys
// that deliveries finished with are handed back in the same round trip as the next claim.
func (d *Drainer) claimLoop(c *claimer) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() {
		if rels := c.close(); len(rels) > 0 {
			r := c.rule.Load()
			d.releaseNow(r, d.cfg.Policy(r), rels...)
		}
	}()
	for {
		select {
		case <-c.quit:
			return
		default:
		}
		if d.stopping() {
			return
		}
		r := c.rule.Load()
		pol := d.cfg.Policy(r)
		if pol.Outflow.Every > 0 {
			d.m.outflow.WithLabelValues(r.Name).Set(float64(time.Second) / float64(pol.Outflow.Every))
		}
		wait := d.cfg.MaxPoll
		if pol.Paused {
			if rels := c.takeReleases(); len(rels) > 0 {
				d.releaseNow(r, pol, rels...)
			}
		} else {
			n := d.takeTokens(c, d.cfg.ClaimBatch)
			if n == 0 {
				return
			}
			start := d.cfg.Clock()
			c.wakeAt.Store(0)
			rels := c.takeReleases()
			// The zero time: Redis's clock decides slots and leases, not this process's.
			res, err := d.cfg.Scheduler.Claim(d.runCtx, r.Name, time.Time{}, queue.ClaimRequest{
				Outflow:   pol.Outflow,
				Owner:     d.cfg.Owner,
				Max:       n,
				Lookahead: d.cfg.Lookahead,
				Lease:     d.cfg.Lease,
				Releases:  rels,
			})
			if err != nil {
				c.putBack(rels)
				d.giveTokens(c, n)
				if d.stopping() {
					return
				}
				d.redisFailed(r.Name, err)
				wait = d.cfg.RedisBackoff
			} else {
				d.redisOK()
				got := d.cfg.Clock()
				c.offset.Store(res.Now.Sub(got).Microseconds())
				if res.Lost > 0 {
					d.log.Warn("claim leases expired before release: another drainer may have taken those keys",
						"rule", r.Name, "keys", res.Lost, "lease", d.cfg.Lease)
				}
				d.giveTokens(c, n-len(res.Claims))
				for _, cl := range res.Claims {
					h := &heldKey{key: cl.Key, fence: cl.Fence}
					h.validUntil.Store(start.Add(d.cfg.Lease).UnixMicro())
					c.hold(h)
					d.inflight.Add(1)
					c.active.Add(1)
					// The slot on the local clock: Redis said how far ahead of its now it is.
					go d.handle(c, r, pol, cl, h, got.Add(cl.Slot.Sub(res.Now)))
				}
				if len(res.Claims) == n {
					continue // the batch was full: more keys may be due now
				}
				if !res.Next.IsZero() {
					if w := res.Next.Sub(res.Now) - d.cfg.Lookahead; w < wait {
						wait = max(w, 100*time.Microsecond)
					}
				}
			}
		}
		d.sleep(c, timer, wait)
	}
}

// sleep waits for wait, or less if a release asks for an earlier claim.
func (d *Drainer) sleep(c *claimer, timer *time.Timer, wait time.Duration) {
	deadline := d.cfg.Clock().Add(wait)
	for {
		if at := c.wakeAt.Load(); at != 0 {
			if t := time.UnixMicro(at).Add(-d.cfg.Lookahead); t.Before(deadline) {
				deadline = t
			}
		}
		w := deadline.Sub(d.cfg.Clock())
		if w <= 0 {
			return
		}
		timer.Reset(w)
		select {
		case <-timer.C:
			return
		case <-c.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-c.quit:
			return
		case <-d.soft:
			return
		case <-d.runCtx.Done():
			return
		}
	}
}

func (d *Drainer) redisFailed(rule string, err error) {
	first := !d.redisDown.Swap(true)
	if first || d.redisLog.allow() {
		d.log.Error("redis unavailable: claiming paused", "rule", rule, "err", err)
	}
}

func (d *Drainer) redisOK() {
	if d.redisDown.Swap(false) {
		d.log.Info("redis back: claiming resumed")
	}
}

// handle delivers the head of one claimed key and releases the key. slotAt is the claim's
// slot on the local clock. The claim's lease is renewed meanwhile (renewLoop).
func (d *Drainer) handle(c *claimer, r *rules.Rule, pol Policy, cl queue.Claim, h *heldKey, slotAt time.Time) {
	defer d.inflight.Done()
	defer c.active.Add(-1)
	defer func() {
		if h.delivery.Load() != deliveryAbandoned { // else the watchdog gave the token back
			d.giveTokens(c, 1)
		}
	}()
	ctx := d.runCtx
	later := queue.Release{Key: cl.Key, Mode: queue.Later, Fence: cl.Fence}
	// Wait for the slot without holding a worker, then for a worker.
	if w := slotAt.Sub(d.cfg.Clock()); w > 0 {
		t := time.NewTimer(w)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			d.release(c, r, pol, h, later)
			return
		}
	}
	select {
	case <-c.workers:
	case <-ctx.Done():
		d.release(c, r, pol, h, later)
		return
	}
	now := d.cfg.Clock()
	if !h.ok(now) {
		// The lease is gone (a renewal found the key taken) or not known to hold (renewals
		// failed): another drainer may deliver this key. Do not.
		c.workers <- struct{}{}
		d.lostKey(c, r, h, "before delivery")
		return
	}
	d.m.lag.WithLabelValues(r.Name).Observe(max(0, c.toRedis(now).Sub(cl.Due).Seconds()))
	rel, ok := d.deliverHead(ctx, c, r, cl, h, now)
	if h.delivery.Load() != deliveryAbandoned { // else the watchdog gave the worker back already
		c.workers <- struct{}{}
	}
	if !ok {
		d.lostKey(c, r, h, "during delivery")
		return
	}
	d.release(c, r, pol, h, rel)
	switch rel.Mode {
	case queue.Released, queue.Retrying, queue.Later:
		c.wakeBy(c.toLocal(maxTime(rel.At, cl.Slot.Add(pol.Outflow.Every))))
	}
}

// confirm renews one claim at once and reports whether it is still held. When Redis does not
// answer, the claim counts as held while its last known lease lasts.
func (d *Drainer) confirm(c *claimer, h *heldKey) bool {
	r := c.rule.Load()
	start := d.cfg.Clock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	res, err := d.cfg.Scheduler.Renew(ctx, r.Name, d.cfg.Owner, time.Time{}, d.cfg.Lease, []queue.Held{{Key: h.key, Fence: h.fence}})
	if err != nil {
		return h.ok(d.cfg.Clock())
	}
	if !res.Held[0] {
		return false
	}
	h.validUntil.Store(start.Add(d.cfg.Lease).UnixMicro())
	return true
}

// lose marks a claim lost (counted once, when first known).
func (d *Drainer) lose(rule string, h *heldKey) {
	if h.markLost() {
		d.m.lost.WithLabelValues(rule).Inc()
	}
}

// lostKey forgets a claim this drainer lost: no release (it would be refused), the key is
// another claim's now.
func (d *Drainer) lostKey(c *claimer, r *rules.Rule, h *heldKey, when string) {
	c.unhold(h)
	d.lose(r.Name, h)
	d.log.Warn("claim lease lost: the key is left to its new claim", "rule", r.Name, "key", h.key, "fence", h.fence, "when", when, "lease", d.cfg.Lease)
}

// renewLoop renews the leases of the rule's held keys every LeaseRenew, in one Redis call,
// until the claim loop has ended and no delivery of the rule is left (or every delivery of
// the drainer has finished). A key the renewal finds gone is marked lost (its delivery is
// cancelled, or it is not delivered); a key whose lease cannot be confirmed in time (Redis
// unreachable) is treated as lost too.
func (d *Drainer) renewLoop(c *claimer) {
	t := time.NewTicker(d.cfg.LeaseRenew)
	defer t.Stop()
	var batch []*heldKey
	var req []queue.Held
	for {
		select {
		case <-t.C:
		case <-d.flushed:
			return
		}
		select {
		case <-c.quit:
			if c.active.Load() == 0 {
				return
			}
		default:
		}
		now := d.cfg.Clock()
		batch, req = batch[:0], req[:0]
		c.mu.Lock()
		for h := range c.held {
			if h.lost.Load() {
				continue
			}
			if u := h.renewUntil.Load(); u != 0 && now.UnixMicro() > u {
				continue // hung delivery: let the lease run out
			}
			batch = append(batch, h)
			req = append(req, queue.Held{Key: h.key, Fence: h.fence})
		}
		c.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		r := c.rule.Load()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), d.cfg.LeaseRenew)
		res, err := d.cfg.Scheduler.Renew(ctx, r.Name, d.cfg.Owner, time.Time{}, d.cfg.Lease, req)
		cancel()
		if err != nil {
			if d.redisLog.allow() {
				d.log.Error("lease renewal failed", "rule", r.Name, "keys", len(batch), "err", err)
			}
			after := d.cfg.Clock()
			for _, h := range batch {
				if !h.ok(after) && c.holds(h) {
					d.lose(r.Name, h)
				}
			}
			continue
		}
		c.offset.Store(res.Now.Sub(d.cfg.Clock()).Microseconds())
		until := now.Add(d.cfg.Lease).UnixMicro()
		for i, h := range batch {
			if res.Held[i] {
				h.validUntil.Store(until)
			} else if c.holds(h) { // not released meanwhile (a release races with the renewal)
				d.lose(r.Name, h)
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// release hands a key back: with the claimer's next claim (one round trip for many keys),
// or at once when the claim loop has ended (stop, rule removed) — then even during a hard
// stop, with a short fresh context, so the key's next message is not held up until the
// lease expires. Renewals of the claim end here.
func (d *Drainer) release(c *claimer, r *rules.Rule, pol Policy, h *heldKey, rel queue.Release) {
	rel.Fence = h.fence
	c.unhold(h)
	if c.addRelease(rel) {
		return
	}
	d.releaseNow(r, pol, rel)
}

func (d *Drainer) releaseNow(r *rules.Rule, pol Policy, rels ...queue.Release) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	if _, err := d.cfg.Scheduler.Release(ctx, r.Name, d.cfg.Owner, pol.Outflow.TotalEvery, rels...); err != nil {
		if errors.Is(err, queue.ErrLeaseLost) {
			d.log.Warn("claim lease expired before release: another drainer may have taken the key",
				"rule", r.Name, "err", err, "lease", d.cfg.Lease)
			return
		}
		if d.releaseLog.allow() {
			d.log.Error("release failed: the keys wait for their lease to expire", "rule", r.Name, "keys", len(rels), "err", err)
		}
	}
}

// deliverHead pops the key's head, delivers it and decides what happens to the key next.
// now is the local clock; the release's times are Redis's. ok is false when the claim was
// lost during the delivery: then nothing is released (the key belongs to a newer claim), and
// only an accepted delivery is acted on (its message deleted).
func (d *Drainer) deliverHead(ctx context.Context, c *claimer, r *rules.Rule, cl queue.Claim, h *heldKey, now time.Time) (rel queue.Release, ok bool) {
	keep := queue.Release{Key: cl.Key, Mode: queue.Released}
	rnow := c.toRedis(now)
	p, err := d.cfg.Queues.Pop(ctx, r.Name, cl.Key)
	switch {
	case errors.Is(err, queue.ErrEmpty):
		return queue.Release{Key: cl.Key, Mode: queue.Emptied, At: cl.Slot}, true
	case errors.Is(err, queue.ErrBadMessage):
		d.log.Error("undecodable message at the head of a key: dead-lettering it", "rule", r.Name, "key", cl.Key, "seq", p.Seq, "err", err)
		return d.dead(ctx, r, p, p.Message, "undecodable message: "+err.Error(), rnow), true
	case err != nil:
		if ctx.Err() == nil && d.natsLog.allow() {
			d.log.Error("pop failed: key retried later", "rule", r.Name, "key", cl.Key, "err", err)
		}
		return queue.Release{Key: cl.Key, Mode: queue.Later, At: rnow.Add(d.cfg.RedisBackoff)}, true
	}
	m := p.Message
	if cl.Retry != nil && cl.Retry.MsgID == m.ID {
		m.Attempt = max(m.Attempt, cl.Retry.Attempts)
		m.LastError = cl.Retry.LastError
	}
	limit := maxAttempts(r)
	// Loggers with fields are built only when something is logged: this is the hot path.
	log := lazyLogger{d: d, rule: r.Name, key: cl.Key, id: m.ID}
	if m.Expired(rnow) {
		// Past its ttl, expires_at or the rule's queue.max_age: never delivered, and not
		// dropped silently either.
		d.m.deliveries.WithLabelValues(r.Name, outcomeExpired).Inc()
		return d.dead(ctx, r, p, m, ReasonExpired, rnow), true
	}
	if m.Attempt >= limit {
		return d.dead(ctx, r, p, m, m.LastError, rnow), true
	}
	attempt := m.Attempt + 1
	m.Fence = cl.Fence
	// The sink has its own timeout (sink.timeout); this deadline stops a sink that ignores
	// it. Renewals keep the lease while the delivery runs, up to the deadline: a delivery
	// still running then is given up on, and its lease runs out.
	deadline := now.Add(sinkTimeout(r) + d.cfg.LeaseRenew)
	dctx, cancel := context.WithCancelCause(ctx)
	dctx, cancelDeadline := context.WithDeadline(dctx, deadline)
	h.mu.Lock()
	h.cancel = cancel
	h.mu.Unlock()
	h.renewUntil.Store(deadline.UnixMicro())
	if !h.ok(d.cfg.Clock()) { // lost while popping: the pop is undone by not deleting
		cancelDeadline()
		cancel(nil)
		return queue.Release{}, false
	}
	d.record(ctx, m.ID, StateDelivering, attempt, "")
	// A sink that ignores its deadline must not hold the rule's worker (and, through the
	// worker, the keys this drainer claimed meanwhile) for ever: LeaseRenew after the
	// deadline the watchdog gives the worker and the claim token back and counts the claim
	// as lost; the key's lease, no longer renewed, runs out and the key is claimed again.
	wd := time.AfterFunc(deadline.Sub(now)+d.cfg.LeaseRenew, func() {
		if h.delivery.CompareAndSwap(deliveryRunning, deliveryAbandoned) {
			d.lose(r.Name, h)
			c.workers <- struct{}{}
			d.giveTokens(c, 1)
			log.get().Warn("sink ignored the delivery deadline: delivery abandoned, its worker freed; the key goes to the next claim once its lease runs out",
				"deadline", sinkTimeout(r)+d.cfg.LeaseRenew)
		}
	})
	out := d.cfg.Sink.Deliver(dctx, r, m)
	wd.Stop()
	h.delivery.CompareAndSwap(deliveryRunning, deliveryReturned) // fails if abandoned meanwhile
	cancelDeadline()
	cancel(nil)
	h.mu.Lock()
	h.cancel = nil
	h.mu.Unlock()
	h.renewUntil.Store(0) // bookkeeping: renewed until released
	// A failed delivery is acted on (retry state, retry stream, dead letter) only once the
	// claim is confirmed: a sink that refused a late delivery of a lost claim (a smaller
	// Sluice-Fence) must not send the message to the dead letters.
	if out.Verdict != Delivered && ctx.Err() == nil && !h.lost.Load() && !d.confirm(c, h) {
		d.lose(r.Name, h)
	}
	if h.lost.Load() {
		// Another claim has the key: it pops the same head if we do not delete it. Only an
		// accepted delivery is acted on, so the message is not delivered once more for it.
		if out.Verdict == Delivered {
			d.deleteAfter(ctx, r, p.Seq, log)
			d.m.deliveries.WithLabelValues(r.Name, Delivered.String()).Inc()
			d.record(ctx, m.ID, StateDelivered, attempt, "")
		}
		return queue.Release{}, false
	}
	if ctx.Err() != nil {
		// Hard stop during the delivery: not the message's fault, and we cannot know whether
		// the sink got it. It stays queued and is delivered again (same id).
		log.get().Warn("delivery interrupted by hard stop: message stays queued")
		return queue.Release{Key: cl.Key, Mode: queue.Later}, true
	}
	m.Attempt = attempt
	switch out.Verdict {
	case Delivered:
		d.deleteAfter(ctx, r, p.Seq, log)
		d.m.deliveries.WithLabelValues(r.Name, Delivered.String()).Inc()
		d.record(ctx, m.ID, StateDelivered, attempt, "")
		if d.log.Enabled(ctx, slog.LevelDebug) {
			log.get().Debug("delivered", "attempt", attempt, "lag", rnow.Sub(cl.Due))
		}
		return keep, true
	case Dead:
		m.LastError = out.Err
		return d.dead(ctx, r, p, m, out.Err, rnow), true
	}
	m.LastError = out.Err
	if attempt >= limit {
		return d.dead(ctx, r, p, m, fmt.Sprintf("%d attempts, last error: %s", attempt, out.Err), rnow), true
	}
	delay := out.RetryAfter
	if delay <= 0 {
		delay = backoff(r.Delivery, attempt)
	}
	at := c.toRedis(d.cfg.Clock()).Add(delay)
	d.m.deliveries.WithLabelValues(r.Name, Retry.String()).Inc()
	d.record(ctx, m.ID, StateRetrying, attempt, out.Err)
	log.get().Info("delivery failed: retrying", "attempt", attempt, "status", out.Status, "err", out.Err, "retry_in", delay)
	if r.Ordering == rules.OrderingRelaxed && d.cfg.Retrier != nil {
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		err := d.cfg.Retrier.ScheduleRetry(pctx, r, m, at)
		pcancel()
		if err == nil {
			d.deleteAfter(ctx, r, p.Seq, log)
			return keep, true
		}
		log.get().Warn("retry stream refused the message: retrying in place", "err", err)
	}
	return queue.Release{Key: cl.Key, Mode: queue.Retrying, At: at,
		State: queue.RetryState{MsgID: m.ID, Attempts: attempt, LastError: out.Err}}, true
}

// dead hands m to the dead letters and deletes it; if the dead letters refuse, m stays at
// the head of its key, marked as out of attempts, and is offered to them again later. now
// is Redis's clock.
func (d *Drainer) dead(ctx context.Context, r *rules.Rule, p queue.Popped, m queue.Message, reason string, now time.Time) queue.Release {
	log := lazyLogger{d: d, rule: r.Name, key: m.Key, id: m.ID}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
	defer cancel()
	if d.cfg.DeadLetters != nil {
		if err := d.cfg.DeadLetters.Dead(pctx, r, m, reason); err != nil {
			log.get().Error("dead letters refused a message: it stays queued", "err", err)
			limit := max(maxAttempts(r), m.Attempt)
			return queue.Release{Key: m.Key, Mode: queue.Retrying, At: now.Add(backoff(r.Delivery, limit)),
				State: queue.RetryState{MsgID: m.ID, Attempts: limit, LastError: reason}}
		}
		log.get().Warn("message dead", "attempts", m.Attempt, "reason", reason)
	} else {
		log.get().Error("message dead; no dead-letter store configured, dropping it", "attempts", m.Attempt, "reason", reason)
	}
	d.deleteAfter(ctx, r, p.Seq, log)
	d.m.deliveries.WithLabelValues(r.Name, Dead.String()).Inc()
	d.record(ctx, m.ID, StateDead, m.Attempt, reason)
	return queue.Release{Key: m.Key, Mode: queue.Released}
}

// deleteAfter deletes a handled message. It retries briefly: a message that cannot be
// deleted is delivered again later (at-least-once), never lost.
func (d *Drainer) deleteAfter(ctx context.Context, r *rules.Rule, seq uint64, log lazyLogger) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
	defer cancel()
	var err error
	for i, pause := 0, 50*time.Millisecond; i < 3; i, pause = i+1, pause*2 {
		if err = d.cfg.Queues.Delete(pctx, r.Name, seq); err == nil {
			return
		}
		if errors.Is(err, queue.ErrGone) {
			log.get().Warn("message already deleted: another drainer handled it too (lease expired?)", "seq", seq)
			return
		}
		select {
		case <-time.After(pause):
		case <-pctx.Done():
		}
	}
	log.get().Error("delete failed: the message will be delivered again", "seq", seq, "err", err)
}

func (d *Drainer) record(ctx context.Context, id, state string, attempt int, lastErr string) {
	if d.cfg.States != nil && id != "" {
		d.cfg.States.Record(context.WithoutCancel(ctx), id, state, attempt, lastErr)
	}
}

func maxAttempts(r *rules.Rule) int {
	if r.Delivery.MaxAttempts > 0 {
		return r.Delivery.MaxAttempts
	}
	return defaultMaxAttempts
}

// backoff is the wait before attempt+1 after attempt failed: exponential from min_backoff,
// capped at max_backoff, with full jitter above min_backoff (a uniform pick in
// [min, min·2^(attempt−1)]), so retries of many messages spread out instead of arriving in waves.
func backoff(p rules.Delivery, attempt int) time.Duration {
	lo, hi := p.MinBackoff, p.MaxBackoff
	if lo <= 0 {
		lo = defaultMinBackoff
	}
	if hi <= 0 {
		hi = defaultMaxBackoff
	}
	if hi < lo {
		hi = lo
	}
	ceil := lo
	for i := 1; i < attempt && ceil < hi; i++ {
		ceil *= 2
	}
	ceil = min(ceil, hi)
	return lo + rand.N(ceil-lo+1)
}

// maintain samples queue depths and reconciles every rule's schedule with its stream.
func (d *Drainer) maintain() {
	defer d.loops.Done()
	type last struct {
		depth, reconcile, force time.Time
		suspect                 bool // the last check saw more keys in the stream than scheduled
	}
	lasts := map[string]*last{}
	period := min(d.cfg.DepthEvery, d.cfg.RulesEvery)
	if d.cfg.ReconcileEvery > 0 {
		period = min(period, d.cfg.ReconcileEvery)
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-d.soft:
			return
		case <-d.runCtx.Done():
			return
		}
		d.claimersMu.Lock()
		rs := make([]*rules.Rule, 0, len(d.claimers))
		for _, c := range d.claimers {
			rs = append(rs, c.rule.Load())
		}
		d.claimersMu.Unlock()
		now := d.cfg.Clock()
		for _, r := range rs {
			l := lasts[r.Name]
			if l == nil {
				l = &last{reconcile: now, force: now}
				lasts[r.Name] = l
			}
			ctx, cancel := context.WithTimeout(d.runCtx, time.Minute)
			if now.Sub(l.depth) >= d.cfg.DepthEvery {
				l.depth = now
				if st, err := d.cfg.Queues.Stats(ctx, r.Name); err == nil {
					d.m.depth.WithLabelValues(r.Name).Set(float64(st.Msgs))
				}
			}
			if d.cfg.ReconcileEvery > 0 && now.Sub(l.reconcile) >= d.cfg.ReconcileEvery {
				l.reconcile = now
				force := now.Sub(l.force) >= d.cfg.ReconcileForceEvery
				if force {
					l.force = now
				}
				// A scan lists every key of the stream: only on the periodic forced run, or when
				// two checks in a row saw a deficit (one alone is usually a publish whose
				// MarkDue is on its way).
				var res queue.Reconciled
				var err error
				switch {
				case force:
					res, err = queue.Reconcile(ctx, d.cfg.Queues, d.cfg.Scheduler, r.Name, time.Time{}, true) // Redis's clock
					l.suspect = false
				case l.suspect:
					res, err = queue.Reconcile(ctx, d.cfg.Queues, d.cfg.Scheduler, r.Name, time.Time{}, false)
					l.suspect = false
				default:
					res, err = queue.CheckSchedule(ctx, d.cfg.Queues, d.cfg.Scheduler, r.Name)
					l.suspect = err == nil && res.Deficit() > 0
				}
				switch {
				case err != nil && !errors.Is(err, queue.ErrNoQueue):
					d.log.Warn("reconcile failed", "rule", r.Name, "err", err)
				case res.Repaired > 0:
					d.log.Warn("reconcile: scheduled keys that had messages but were not due (lost MarkDue?)",
						"rule", r.Name, "repaired", res.Repaired, "keys", res.Keys)
				}
			}
			cancel()
		}
	}
}

// lazyLogger carries a message's log fields and builds the logger only when used.
type lazyLogger struct {
	d             *Drainer
	rule, key, id string
}

func (l lazyLogger) get() *slog.Logger {
	return l.d.log.With("rule", l.rule, "key", l.key, "id", l.id)
}

// throttle lets one log line through per period.
type throttle struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (t *throttle) allow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.last) < t.every {
		return false
	}
	t.last = now
	return true
}
