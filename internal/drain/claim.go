package drain

// Claiming: a claimer per rule takes due keys from the Scheduler within its share of
// delivery workers, holds their leases and renews them while deliveries run.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

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

	sinkFreed chan struct{} // cap 1: a delivery of this rule gave its sink.max_in_flight slot back
}

func newClaimer(name string, workers, maxClaimed int) *claimer {
	c := &claimer{name: name, wake: make(chan struct{}, 1), quit: make(chan struct{}),
		tokens: make(chan struct{}, maxClaimed), workers: make(chan struct{}, workers),
		held: map[*heldKey]struct{}{}, sinkFreed: make(chan struct{}, 1)}
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
	// claimSpan is the claim's span when tracing is on: the delivery span links to it.
	claimSpan trace.SpanContext
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

	// flight is set for a key with several deliveries at once (see flight.go); stepped
	// when this claim came from a step (it holds no claim token); popped once it took a
	// message from the key's queue.
	flight  *flight
	stepped bool
	popped  bool
}

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
			t0 := time.Now() // the claim span's start (start may be a test's clock)
			c.wakeAt.Store(0)
			rels := c.takeReleases()
			// The zero time: Redis's clock decides slots and leases, not this process's.
			res, err := d.cfg.Scheduler.Claims.Claim(d.runCtx, r.Name, time.Time{}, queue.ClaimRequest{
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
				var claimSpan trace.SpanContext
				if len(res.Claims) > 0 && telemetry.On() {
					claimSpan = traceClaim(d.runCtx, r, t0, len(res.Claims), n)
				}
				for _, cl := range res.Claims {
					h := &heldKey{key: cl.Key, fence: cl.Fence, claimSpan: claimSpan}
					if n := maxInFlight(r); n > 1 {
						h.flight = &flight{max: n}
					}
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
	// allow is asked even for the first failure: it takes the throttle's line, or the
	// next failure would be let through as the throttle's first (two lines at once).
	if allow := d.redisLog.allow(); first || allow {
		d.log.Error("redis unavailable: claiming paused", "rule", rule, "err", err)
	}
	d.sig.Raise(evClaimFailed)
}

func (d *Drainer) redisOK() {
	if d.redisDown.Swap(false) {
		d.log.Info("redis back: claiming resumed")
	}
}

// confirm renews one claim at once and reports whether it is still held. When Redis does not
// answer, the claim counts as held while its last known lease lasts.
func (d *Drainer) confirm(c *claimer, h *heldKey) bool {
	r := c.rule.Load()
	start := d.cfg.Clock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	res, err := d.cfg.Scheduler.Claims.Renew(ctx, r.Name, d.cfg.Owner, time.Time{}, d.cfg.Lease, []queue.Held{{Key: h.key, Fence: h.fence}})
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
	if h.flight != nil {
		d.flightDone(c, r, d.cfg.Policy(r), h, queue.Release{}, false)
	}
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
		d.sig.Raise(evRenewSent)
		res, err := d.cfg.Scheduler.Claims.Renew(ctx, r.Name, d.cfg.Owner, time.Time{}, d.cfg.Lease, req)
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
			d.sig.Raise(evRenewed)
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
		d.sig.Raise(evRenewed)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
