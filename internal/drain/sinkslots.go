package drain

// The rule-wide cap on deliveries at the sink (sink.max_in_flight): each delivery of a
// capped rule takes a slot in Redis (queue.Scheduler.AcquireInFlight), shared by every
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
	slot = d.cfg.Owner + "#" + strconv.FormatUint(d.slotSeq.Add(1), 10)
	waited := false
	for {
		if !h.ok(d.cfg.Clock()) || d.stopping() {
			return "", false // a stopping drainer hands the key back rather than wait
		}
		ok, wait, err := d.cfg.Scheduler.AcquireInFlight(ctx, r.Name, slot, r.Sink.MaxInFlight, d.sinkSlotLease(r))
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
		case <-c.sinkFreed:
			t.Stop()
		case <-c.quit: // the rule is gone
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	if err := d.cfg.Scheduler.ReleaseInFlight(ctx, r.Name, slot); err != nil && d.redisLog.allow() {
		d.log.Error("giving a sink slot back failed: it frees when its lease ends", "rule", r.Name, "err", err, "lease", d.sinkSlotLease(r))
	}
	select {
	case c.sinkFreed <- struct{}{}:
	default:
	}
}
