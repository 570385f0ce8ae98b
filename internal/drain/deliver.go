package drain

// Delivering: one claimed key's head goes to the sink; the outcome releases the key
// (next slot, retry backoff) or moves the message to the dead letters.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/backoff"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

func sinkTimeout(r *rules.Rule) time.Duration {
	if r.Sink.Timeout > 0 {
		return r.Sink.Timeout
	}
	return defaultSinkTimeout
}

// handle delivers the head of one claimed key and releases the key. slotAt is the claim's
// slot on the local clock. The claim's lease is renewed meanwhile (renewLoop).
func (d *Drainer) handle(c *claimer, r *rules.Rule, pol Policy, cl queue.Claim, h *heldKey, slotAt time.Time) {
	defer d.inflight.Done()
	defer c.active.Add(-1)
	defer func() {
		// A step holds no token; an abandoned delivery's token was given back by the watchdog.
		if !h.stepped && h.delivery.Load() != deliveryAbandoned {
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
	slot := ""
	if r.Sink.MaxInFlight > 0 {
		var took bool
		if slot, took = d.takeSinkSlot(ctx, c, r, h); !took {
			c.workers <- struct{}{}
			if !h.ok(d.cfg.Clock()) {
				d.lostKey(c, r, h, "waiting for a sink slot")
			} else {
				d.release(c, r, pol, h, later)
			}
			return
		}
		now = d.cfg.Clock()
	}
	d.m.lag.WithLabelValues(r.Name).Observe(max(0, c.toRedis(now).Sub(cl.Due).Seconds()))
	rel, ok := d.deliverHead(ctx, c, r, pol, cl, h, now)
	if slot != "" {
		d.giveSinkSlot(c, r, slot)
	}
	if h.delivery.Load() != deliveryAbandoned { // else the watchdog gave the worker back already
		c.workers <- struct{}{}
	}
	if !ok {
		d.lostKey(c, r, h, "during delivery")
		return
	}
	d.release(c, r, pol, h, rel)
	if h.flight != nil {
		return // the flight asks for the key's slots itself (Step)
	}
	switch rel.Mode {
	case queue.Released, queue.Retrying, queue.Later:
		c.wakeBy(c.toLocal(maxTime(rel.At, cl.Slot.Add(pol.Outflow.Every))))
	}
}

// release hands a key back: with the claimer's next claim (one round trip for many keys),
// or at once when the claim loop has ended (stop, rule removed) — then even during a hard
// stop, with a short fresh context, so the key's next message is not held up until the
// lease expires. Renewals of the claim end here.
func (d *Drainer) release(c *claimer, r *rules.Rule, pol Policy, h *heldKey, rel queue.Release) {
	if h.flight != nil {
		d.flightDone(c, r, pol, h, rel, true)
		return
	}
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
	if _, err := d.cfg.Scheduler.Claims.Release(ctx, r.Name, d.cfg.Owner, pol.Outflow.TotalEvery, rels...); err != nil {
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
func (d *Drainer) deliverHead(ctx context.Context, c *claimer, r *rules.Rule, pol Policy, cl queue.Claim, h *heldKey, now time.Time) (rel queue.Release, ok bool) {
	keep := queue.Release{Key: cl.Key, Mode: queue.Released}
	rnow := c.toRedis(now)
	var p queue.Popped
	var err error
	if f := h.flight; f != nil {
		// Several deliveries of this key at once: take the message after the last one taken,
		// and ask for the key's next slot at once, while this one is at the sink.
		p, err = d.cfg.Queues.PopAfter(ctx, r.Name, cl.Key, f.after())
		if err == nil || errors.Is(err, queue.ErrBadMessage) {
			h.popped = true
			if f.taken(p.Seq, d.stopping()) {
				d.step(c, r, pol, h)
			}
		}
	} else {
		p, err = d.cfg.Queues.Pop(ctx, r.Name, cl.Key)
	}
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
			if !h.stepped {
				d.giveTokens(c, 1)
			}
			log.get().Warn("sink ignored the delivery deadline: delivery abandoned, its worker freed; the key goes to the next claim once its lease runs out",
				"deadline", sinkTimeout(r)+d.cfg.LeaseRenew)
		}
	})
	if attempt == 1 && !m.CreatedAt.IsZero() {
		d.m.inQueue.WithLabelValues(r.Name).Observe(max(0, now.Sub(m.CreatedAt).Seconds()))
	}
	// The message's trace context (the admission's span, or the submitter's) is the
	// delivery's parent, and reaches the sink even when this process does not trace.
	dctx = telemetry.Context(dctx, m.TraceParent, m.TraceState)
	var span trace.Span
	if telemetry.On() {
		dctx, span = d.startDelivery(dctx, r, m, attempt, h)
	}
	out := d.cfg.Sink.Deliver(dctx, r, m)
	if span != nil {
		endDelivery(span, out)
	}
	if class := responseClass(out); ctx.Err() == nil {
		d.m.responses.WithLabelValues(r.Name, class).Inc()
	}
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
			d.delivered(ctx, r, p.Seq, m.ID, attempt, log)
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
		d.delivered(ctx, r, p.Seq, m.ID, attempt, log)
		if d.log.Enabled(ctx, slog.LevelDebug) {
			log.get().Debug("delivered", "attempt", attempt, "lag", rnow.Sub(cl.Due))
		}
		return keep, true
	case Dead:
		out.Err = redact.Text(out.Err) // a sink that built its Outcome by hand
		m.LastError = out.Err
		return d.dead(ctx, r, p, m, out.Err, rnow), true
	}
	out.Err = redact.Text(out.Err)
	m.LastError = out.Err
	if attempt >= limit {
		return d.dead(ctx, r, p, m, fmt.Sprintf("%d attempts, last error: %s", attempt, out.Err), rnow), true
	}
	delay := out.RetryAfter
	if delay <= 0 {
		delay = backoff.Delivery(r, attempt, nil)
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
			return queue.Release{Key: m.Key, Mode: queue.Retrying, At: now.Add(backoff.Delivery(r, limit, nil)),
				State: queue.RetryState{MsgID: m.ID, Attempts: limit, LastError: reason}}
		}
		log.get().Warn("message dead", "attempts", m.Attempt, "reason", reason)
	} else {
		log.get().Error("message dead; no dead-letter store configured, dropping it", "attempts", m.Attempt, "reason", reason)
	}
	d.deleteAfter(ctx, r, p.Seq, log)
	d.observeFinal(r, Dead.String(), m.Attempt)
	d.m.deliveries.WithLabelValues(r.Name, Dead.String()).Inc()
	d.record(ctx, m.ID, StateDead, m.Attempt, reason)
	return queue.Release{Key: m.Key, Mode: queue.Released}
}

// delivered hands a delivered message's record over, then deletes the message from its
// queue: the record (written asynchronously) is on its way before the message leaves, so
// a status read in between rarely finds it in neither place. Deleting first, one read in
// the client's system test answered 404 "no longer tracked" for a message just delivered.
func (d *Drainer) delivered(ctx context.Context, r *rules.Rule, seq uint64, id string, attempt int, log lazyLogger) {
	d.record(ctx, id, StateDelivered, attempt, "")
	d.deleteAfter(ctx, r, seq, log)
	d.observeFinal(r, Delivered.String(), attempt)
	d.m.deliveries.WithLabelValues(r.Name, Delivered.String()).Inc()
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
