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

	tokens  chan struct{} // one per key this drainer may still claim (MaxClaimed)
	workers chan struct{} // one per idle worker (Workers)

	mu       sync.Mutex
	started  bool
	soft     chan struct{} // closed by Stop: stop claiming
	softOnce sync.Once
	done     chan struct{} // closed when everything has stopped
	runCtx   context.Context
	cancel   context.CancelFunc

	loops    sync.WaitGroup // rules manager, claimers, maintenance
	inflight sync.WaitGroup // deliveries

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
		tokens:     make(chan struct{}, cfg.MaxClaimed),
		workers:    make(chan struct{}, cfg.Workers),
		soft:       make(chan struct{}),
		done:       make(chan struct{}),
		claimers:   map[string]*claimer{},
		redisLog:   throttle{every: 30 * time.Second},
		natsLog:    throttle{every: 30 * time.Second},
		releaseLog: throttle{every: 30 * time.Second},
	}
	for i := 0; i < cfg.MaxClaimed; i++ {
		d.tokens <- struct{}{}
	}
	for i := 0; i < cfg.Workers; i++ {
		d.workers <- struct{}{}
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
	d.log.Info("drainer started", "workers", d.cfg.Workers, "lookahead", d.cfg.Lookahead, "lease", d.cfg.Lease)
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

// claimer claims the keys of one rule.
type claimer struct {
	name   string
	rule   atomic.Pointer[rules.Rule]
	wake   chan struct{} // cap 1: a release asked for an earlier claim
	wakeAt atomic.Int64  // unix µs of the earliest claim a release asked for (0 = none)
	quit   chan struct{} // closed when the rule disappears

	mu      sync.Mutex
	pending []queue.Release // finished keys, handed back with the next claim
	closed  bool            // the claim loop ended: release directly
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
				c = &claimer{name: r.Name, wake: make(chan struct{}, 1), quit: make(chan struct{})}
				d.claimers[r.Name] = c
			}
			c.rule.Store(r)
			d.claimersMu.Unlock()
			if !ok {
				claimLoops.Add(1)
				go func() { defer claimLoops.Done(); d.claimLoop(c) }()
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

// lease is the claim lease for rule r: at least twice its sink timeout, so a slow delivery
// is never handed to a second drainer while the first is still waiting for the sink.
func (d *Drainer) lease(r *rules.Rule) time.Duration {
	return max(d.cfg.Lease, 2*sinkTimeout(r)+d.cfg.Lookahead)
}

func sinkTimeout(r *rules.Rule) time.Duration {
	if r.Sink.Timeout > 0 {
		return r.Sink.Timeout
	}
	return defaultSinkTimeout
}

// takeTokens waits for one idle worker and takes up to want more without waiting.
func (d *Drainer) takeTokens(c *claimer, want int) int {
	select {
	case <-d.tokens:
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
		case <-d.tokens:
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
		case <-d.tokens:
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

func (d *Drainer) giveTokens(n int) {
	for i := 0; i < n; i++ {
		d.tokens <- struct{}{}
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
			now := d.cfg.Clock()
			c.wakeAt.Store(0)
			rels := c.takeReleases()
			res, err := d.cfg.Scheduler.Claim(d.runCtx, r.Name, now, queue.ClaimRequest{
				Outflow:   pol.Outflow,
				Owner:     d.cfg.Owner,
				Max:       n,
				Lookahead: d.cfg.Lookahead,
				Lease:     d.lease(r),
				Releases:  rels,
			})
			if err != nil {
				c.putBack(rels)
				d.giveTokens(n)
				if d.stopping() {
					return
				}
				d.redisFailed(r.Name, err)
				wait = d.cfg.RedisBackoff
			} else {
				d.redisOK()
				if res.Lost > 0 {
					d.log.Warn("claim leases expired before release: another drainer may have taken those keys",
						"rule", r.Name, "keys", res.Lost, "lease", d.lease(r))
				}
				d.giveTokens(n - len(res.Claims))
				for _, cl := range res.Claims {
					d.inflight.Add(1)
					go d.handle(c, r, pol, cl)
				}
				if len(res.Claims) == n {
					continue // the batch was full: more keys may be due now
				}
				if !res.Next.IsZero() {
					if w := res.Next.Sub(now) - d.cfg.Lookahead; w < wait {
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

// handle delivers the head of one claimed key and releases the key.
func (d *Drainer) handle(c *claimer, r *rules.Rule, pol Policy, cl queue.Claim) {
	defer d.inflight.Done()
	defer d.giveTokens(1)
	ctx := d.runCtx
	// Wait for the slot without holding a worker, then for a worker.
	if w := cl.Slot.Sub(d.cfg.Clock()); w > 0 {
		t := time.NewTimer(w)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			d.release(c, r, pol, queue.Release{Key: cl.Key, Mode: queue.Later})
			return
		}
	}
	select {
	case <-d.workers:
	case <-ctx.Done():
		d.release(c, r, pol, queue.Release{Key: cl.Key, Mode: queue.Later})
		return
	}
	now := d.cfg.Clock()
	if left := cl.Slot.Add(d.lease(r)).Sub(now); left < d.lease(r)/2 {
		// Waited too long for a worker (saturated): a delivery now could outlive the lease
		// and overlap another drainer's delivery of the same key. Hand the key back.
		d.workers <- struct{}{}
		d.release(c, r, pol, queue.Release{Key: cl.Key, Mode: queue.Later})
		return
	}
	d.m.lag.WithLabelValues(r.Name).Observe(max(0, now.Sub(cl.Due).Seconds()))
	rel := d.deliverHead(ctx, r, cl, now)
	d.workers <- struct{}{}
	d.release(c, r, pol, rel)
	switch rel.Mode {
	case queue.Released, queue.Retrying, queue.Later:
		c.wakeBy(maxTime(rel.At, cl.Slot.Add(pol.Outflow.Every)))
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
// lease expires.
func (d *Drainer) release(c *claimer, r *rules.Rule, pol Policy, rel queue.Release) {
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
				"rule", r.Name, "err", err, "lease", d.lease(r))
			return
		}
		if d.releaseLog.allow() {
			d.log.Error("release failed: the keys wait for their lease to expire", "rule", r.Name, "keys", len(rels), "err", err)
		}
	}
}

// deliverHead pops the key's head, delivers it and decides what happens to the key next.
func (d *Drainer) deliverHead(ctx context.Context, r *rules.Rule, cl queue.Claim, now time.Time) queue.Release {
	keep := queue.Release{Key: cl.Key, Mode: queue.Released}
	p, err := d.cfg.Queues.Pop(ctx, r.Name, cl.Key)
	switch {
	case errors.Is(err, queue.ErrEmpty):
		return queue.Release{Key: cl.Key, Mode: queue.Emptied, At: cl.Slot}
	case errors.Is(err, queue.ErrBadMessage):
		d.log.Error("undecodable message at the head of a key: dead-lettering it", "rule", r.Name, "key", cl.Key, "seq", p.Seq, "err", err)
		return d.dead(ctx, r, p, p.Message, "undecodable message: "+err.Error(), now)
	case err != nil:
		if ctx.Err() == nil && d.natsLog.allow() {
			d.log.Error("pop failed: key retried later", "rule", r.Name, "key", cl.Key, "err", err)
		}
		return queue.Release{Key: cl.Key, Mode: queue.Later, At: now.Add(d.cfg.RedisBackoff)}
	}
	m := p.Message
	if cl.Retry != nil && cl.Retry.MsgID == m.ID {
		m.Attempt = max(m.Attempt, cl.Retry.Attempts)
		m.LastError = cl.Retry.LastError
	}
	limit := maxAttempts(r)
	// Loggers with fields are built only when something is logged: this is the hot path.
	log := lazyLogger{d: d, rule: r.Name, key: cl.Key, id: m.ID}
	if m.Expired(d.cfg.Clock()) {
		// Past its ttl, expires_at or the rule's queue.max_age: never delivered, and not
		// dropped silently either.
		d.m.deliveries.WithLabelValues(r.Name, outcomeExpired).Inc()
		return d.dead(ctx, r, p, m, ReasonExpired, now)
	}
	if m.Attempt >= limit {
		return d.dead(ctx, r, p, m, m.LastError, now)
	}
	attempt := m.Attempt + 1
	d.record(ctx, m.ID, StateDelivering, attempt, "")
	// Never deliver past 3/4 of the lease (counted from the slot), so a delivery is over
	// before another drainer may take the key.
	dctx, cancel := context.WithDeadline(ctx, cl.Slot.Add(d.lease(r)*3/4))
	out := d.cfg.Sink.Deliver(dctx, r, m)
	cancel()
	if ctx.Err() != nil {
		// Hard stop during the delivery: not the message's fault, and we cannot know whether
		// the sink got it. It stays queued and is delivered again (same id).
		log.get().Warn("delivery interrupted by hard stop: message stays queued")
		return queue.Release{Key: cl.Key, Mode: queue.Later}
	}
	m.Attempt = attempt
	switch out.Verdict {
	case Delivered:
		d.deleteAfter(ctx, r, p.Seq, log)
		d.m.deliveries.WithLabelValues(r.Name, Delivered.String()).Inc()
		d.record(ctx, m.ID, StateDelivered, attempt, "")
		if d.log.Enabled(ctx, slog.LevelDebug) {
			log.get().Debug("delivered", "attempt", attempt, "lag", now.Sub(cl.Due))
		}
		return keep
	case Dead:
		m.LastError = out.Err
		return d.dead(ctx, r, p, m, out.Err, now)
	}
	m.LastError = out.Err
	if attempt >= limit {
		return d.dead(ctx, r, p, m, fmt.Sprintf("%d attempts, last error: %s", attempt, out.Err), now)
	}
	delay := out.RetryAfter
	if delay <= 0 {
		delay = backoff(r.Delivery, attempt)
	}
	at := d.cfg.Clock().Add(delay)
	d.m.deliveries.WithLabelValues(r.Name, Retry.String()).Inc()
	d.record(ctx, m.ID, StateRetrying, attempt, out.Err)
	log.get().Info("delivery failed: retrying", "attempt", attempt, "status", out.Status, "err", out.Err, "retry_in", delay)
	if r.Ordering == rules.OrderingRelaxed && d.cfg.Retrier != nil {
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		err := d.cfg.Retrier.ScheduleRetry(pctx, r, m, at)
		pcancel()
		if err == nil {
			d.deleteAfter(ctx, r, p.Seq, log)
			return keep
		}
		log.get().Warn("retry stream refused the message: retrying in place", "err", err)
	}
	return queue.Release{Key: cl.Key, Mode: queue.Retrying, At: at,
		State: queue.RetryState{MsgID: m.ID, Attempts: attempt, LastError: out.Err}}
}

// dead hands m to the dead letters and deletes it; if the dead letters refuse, m stays at
// the head of its key, marked as out of attempts, and is offered to them again later.
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
					res, err = queue.Reconcile(ctx, d.cfg.Queues, d.cfg.Scheduler, r.Name, now, true)
					l.suspect = false
				case l.suspect:
					res, err = queue.Reconcile(ctx, d.cfg.Queues, d.cfg.Scheduler, r.Name, now, false)
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
