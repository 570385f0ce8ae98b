package drain

// The rule-wide cap on deliveries at the sink (sink.max_in_flight): each delivery of a
// capped rule takes a slot in Redis (queue.Scheduler.SinkSlots.Acquire), shared by every
// drainer, and gives it back when the sink has answered.

import (
	"context"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

// sinkSlotPoll is how often a delivery waiting for a slot asks Redis again, when no
// delivery of this drainer frees one sooner (another drainer's may).
const sinkSlotPoll = 50 * time.Millisecond

// sinkSlotLease bounds how long a slot outlives a drainer that died holding it: the longest
// a delivery may take before the watchdog abandons it, and a second.
func (d *Drainer) sinkSlotLease(r *rules.Rule) time.Duration {
	return sinkTimeout(r) + 2*d.cfg.LeaseRenew + time.Second
}

// takeSinkSlot waits until one of r's slots is free and takes it; it returns the slot's
// name. took is false when the drainer stops or the key's claim is lost meanwhile; the
// claim's lease is renewed while it waits. A Redis error waits RedisBackoff and asks again:
// the cap is never skipped.
func (d *Drainer) takeSinkSlot(ctx context.Context, c *claimer, r *rules.Rule, h *heldKey) (slot string, took bool) {
	held := func() bool { return h.ok(d.cfg.Clock()) }
	return d.waitSinkSlot(ctx, r, d.sinkSlotLease(r), held, c.sinkFreed, c.quit)
}

// waitSinkSlot is the wait both engines share: it asks Redis for one of r's slots until it
// gets one (held for lease), or until held says the delivery may no longer go, the drainer
// stops, quit closes (the rule is gone) or ctx ends. freed wakes it when a delivery of this
// drainer gives a slot back; otherwise it asks again every sinkSlotPoll.
func (d *Drainer) waitSinkSlot(ctx context.Context, r *rules.Rule, lease time.Duration, held func() bool, freed, quit <-chan struct{}) (slot string, took bool) {
	slot = d.cfg.Owner + "#" + strconv.FormatUint(d.slotSeq.Add(1), 10)
	waited := false
	for {
		if (held != nil && !held()) || d.stopping() {
			return "", false // a stopping drainer hands the key back rather than wait
		}
		ok, wait, err := d.cfg.Scheduler.SinkSlots.Acquire(ctx, r.Name, slot, r.Sink.MaxInFlight, lease)
		switch {
		case ok:
			return slot, true
		case err != nil:
			if ctx.Err() != nil {
				return "", false
			}
			if d.redisLog.allow() {
				d.log.Error("taking a sink slot failed: the delivery waits", "rule", r.Name, "err", err)
			}
			wait = d.cfg.RedisBackoff
		default:
			if !waited {
				waited = true
				d.m.slotWaits.WithLabelValues(r.Name).Inc()
			}
			wait = min(wait, sinkSlotPoll)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-freed:
			t.Stop()
		case <-quit: // the rule is gone
			t.Stop()
			return "", false
		case <-ctx.Done():
			t.Stop()
			return "", false
		}
	}
}

// giveSinkSlot gives a slot back and wakes one delivery of the rule waiting for it.
func (d *Drainer) giveSinkSlot(c *claimer, r *rules.Rule, slot string) {
	d.returnSinkSlot(r, slot, d.sinkSlotLease(r), c.sinkFreed)
}

// returnSinkSlot gives slot back to Redis and wakes one delivery waiting on freed. A slot
// that cannot be given back frees itself when its lease ends.
func (d *Drainer) returnSinkSlot(r *rules.Rule, slot string, lease time.Duration, freed chan struct{}) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	if err := d.cfg.Scheduler.SinkSlots.Release(ctx, r.Name, slot); err != nil && d.redisLog.allow() {
		d.log.Error("giving a sink slot back failed: it frees when its lease ends", "rule", r.Name, "err", err, "lease", lease)
	}
	select {
	case freed <- struct{}{}:
	default:
	}
}

// The own engine splits sink.max_in_flight over the live drainers in memory (sinkShare):
// no Redis per delivery. That cannot hold a cap below the number of drainers (each needs
// at least one delivery at a time), so only for such a rule — a rare configuration — each
// delivery takes one of the Redis slots above, as the claim engine's do.

// ownSlotsNeeded tells whether r's deliveries take Redis slots on this drainer: its cap is
// below the rule's live drainers (as the last renewal counted them).
func (o *orule) ownSlotsNeeded(r *rules.Rule) bool {
	if r.Sink.MaxInFlight <= 0 {
		return false
	}
	_, redis := o.sinkShare(r.Sink.MaxInFlight)
	return redis
}

// ownSinkSlotLease bounds how long a slot outlives a drainer that died holding it: longer
// than a delivery may take before the sweep abandons it (sink.timeout + OwnRenew), so an
// abandoned delivery still at the sink keeps its slot.
func (d *Drainer) ownSinkSlotLease(r *rules.Rule) time.Duration {
	return sinkTimeout(r) + 2*d.cfg.OwnRenew + time.Second
}

// takeOwnSinkSlot waits until one of r's slots is free and takes it. took is false when
// ctx ends (the partition was lost or lapsed, a hard stop), the rule is gone or the drainer
// stops: the message is then not delivered (it stays queued). A Redis error waits
// RedisBackoff and asks again: the cap is never skipped, and the partition's deadline (no
// renewal reaches Redis either) ends the wait.
func (o *orule) takeOwnSinkSlot(ctx context.Context, r *rules.Rule) (slot string, took bool) {
	return o.d.waitSinkSlot(ctx, r, o.d.ownSinkSlotLease(r), nil, o.sinkFreed, o.quit)
}

// giveOwnSinkSlot gives a slot back and wakes one delivery of the rule waiting for it.
func (o *orule) giveOwnSinkSlot(r *rules.Rule, slot string) {
	o.d.returnSinkSlot(r, slot, o.d.ownSinkSlotLease(r), o.sinkFreed)
}
