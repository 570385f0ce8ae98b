package drain

// Concurrent deliveries of one key (delivery.max_in_flight > 1): the drainer that claimed
// the key keeps it, and each message taken from the key's queue asks Redis for the key's
// next slot at once (Scheduler.Meter.Step) instead of releasing the key after the sink answers.
// Messages still leave one per slot, at the key's outflow and within the rule's
// total_outflow; what changes is that a slow sink no longer holds back the next slot, up to
// max_in_flight deliveries at once. Each delivery pops the key's first message after the
// last one taken (Queues.PopAfter), so two deliveries never carry the same message; a
// message left in the queue (a retry the retry stream refused) is delivered again once the
// key has been released and claimed afresh.

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// flight is the shared state of the claims of one key with several deliveries in flight:
// the claim that started it and every step after it share one flight and one fence.
type flight struct {
	max int

	mu      sync.Mutex
	cursor  uint64         // stream sequence of the last message taken: the next pops after it
	running int            // messages taken and not yet done with
	owed    bool           // max reached: the next step waits for a delivery to finish
	ended   bool           // no more steps: the queue was empty, or a delivery asks for the key back
	final   *queue.Release // how the key is released once running drops to 0
	done    bool           // released or lost
}

func maxInFlight(r *rules.Rule) int {
	if r.Ordering != rules.OrderingRelaxed {
		return 1
	}
	return max(1, r.Delivery.MaxInFlight)
}

// after is the sequence the next pop starts after.
func (f *flight) after() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursor
}

// taken records that a delivery took the message at seq and reports whether it should
// ask for the key's next slot now (else it is owed until a delivery finishes). stopping
// ends the flight: the drainer is stopping, the key goes back once its deliveries are done.
func (f *flight) taken(seq uint64, stopping bool) (step bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cursor = max(f.cursor, seq)
	f.running++
	if stopping && !f.ended {
		f.ended = true
		f.final = &queue.Release{Mode: queue.Later} // due again at its next slot
	}
	if f.ended || f.done {
		return false
	}
	if f.running < f.max {
		return true
	}
	f.owed = true
	return false
}

// finish records the end of one of the flight's claims: popped says whether it took a
// message, rel is what a single delivery would have released the key with (ok false: the
// claim was lost). It returns whether to step now, and the release to hand Redis when the
// last delivery of an ended flight is done.
func (f *flight) finish(popped bool, rel queue.Release, ok bool) (step bool, release *queue.Release) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if popped {
		f.running--
	}
	if !ok {
		f.done = true // the key is another claim's now
	}
	if f.done {
		return false, nil
	}
	switch rel.Mode {
	case queue.Released:
	case queue.Emptied:
		f.ended = true
		if f.final == nil {
			r := rel
			f.final = &r
		}
	default: // Retrying in place, Later (stop, Redis or NATS trouble): the key comes back at rel.At
		f.ended = true
		r := rel
		f.final = &r
	}
	if f.ended {
		if f.running == 0 {
			f.done = true
			return false, f.final
		}
		return false, nil
	}
	if f.owed && f.running < f.max {
		f.owed = false
		return true, nil
	}
	return false, nil
}

// step asks Redis for the flight's next slot and starts the claim that uses it. It runs
// on its own goroutine; it holds no claim token (the flight's first claim has one).
func (d *Drainer) step(c *claimer, r *rules.Rule, pol Policy, h *heldKey) {
	d.inflight.Add(1)
	c.active.Add(1)
	go func() {
		start := d.cfg.Clock()
		ctx, cancel := context.WithTimeout(d.runCtx, postTimeout)
		slot, now, held, err := d.cfg.Scheduler.Meter.Step(ctx, r.Name, d.cfg.Owner, h.key, h.fence, time.Time{}, pol.Outflow, d.cfg.Lease)
		cancel()
		got := d.cfg.Clock()
		nh := &heldKey{key: h.key, fence: h.fence, flight: h.flight, stepped: true, claimSpan: h.claimSpan}
		switch {
		case err != nil:
			if d.redisLog.allow() {
				d.log.Error("next slot of a key with deliveries in flight failed: the key is released once they finish", "rule", r.Name, "err", err)
			}
			d.finishStep(c, r, pol, nh, queue.Release{Key: h.key, Mode: queue.Later, At: c.toRedis(got).Add(d.cfg.RedisBackoff)})
		case !held:
			d.lose(r.Name, nh)
			d.finishStep(c, r, pol, nh, queue.Release{})
		default:
			c.offset.Store(now.Sub(got).Microseconds())
			nh.validUntil.Store(start.Add(d.cfg.Lease).UnixMicro())
			c.hold(nh)
			cl := queue.Claim{Key: h.key, Slot: slot, Due: slot, Fence: h.fence}
			d.handle(c, r, pol, cl, nh, got.Add(slot.Sub(now)))
			return
		}
	}()
}

// finishStep ends a step that never became a claim.
func (d *Drainer) finishStep(c *claimer, r *rules.Rule, pol Policy, h *heldKey, rel queue.Release) {
	defer d.inflight.Done()
	defer c.active.Add(-1)
	d.flightDone(c, r, pol, h, rel, rel.Mode != "")
}

// flightDone is release (ok) or lostKey (!ok) for a claim of a flight.
func (d *Drainer) flightDone(c *claimer, r *rules.Rule, pol Policy, h *heldKey, rel queue.Release, ok bool) {
	c.unhold(h)
	step, final := h.flight.finish(h.popped, rel, ok)
	if step {
		d.step(c, r, pol, h)
	}
	if final != nil {
		final.Key, final.Fence = h.key, h.fence
		if !c.addRelease(*final) {
			d.releaseNow(r, pol, *final)
		}
		c.wakeBy(d.cfg.Clock())
	}
}
