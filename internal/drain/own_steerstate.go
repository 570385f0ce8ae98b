package drain

// Steering state the own engine shares through Redis (queue/steerstate.go): each drainer's
// sink breaker per rule, published on its changes of state for the admin API, and the
// adaptive outflow of throttled keys, handed to a partition's next owner with the pace
// entries. Neither is written per message.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/adaptive"
	"github.com/sluice-io/sluice/internal/breaker"
	"github.com/sluice-io/sluice/queue"
)

// breakerRecordTTL is how long a published breaker state is shown without being written
// again: a drainer refreshes its record every breakerRecordTTL/3 while its breaker is not
// closed, so the record of a drainer that died disappears within it.
const breakerRecordTTL = time.Minute

// brkPub serializes a rule's breaker publications; each writes the breaker's state at
// that moment, so the last write is the current state whatever the goroutines' order.
type brkPub struct {
	mu   sync.Mutex
	last time.Time // when the record was last written (local clock)
	open bool      // the last record written was not closed
}

// publishBreaker writes this drainer's breaker record of the rule (breaker.Notify).
func (o *orule) publishBreaker(b *breaker.Breaker) {
	d := o.d
	o.pub.mu.Lock()
	defer o.pub.mu.Unlock()
	o.steerMu.Lock()
	current := o.brk == b
	o.steerMu.Unlock()
	if !current {
		return // a breaker replaced by a rules reload: its successor speaks for the rule
	}
	s := b.Snapshot()
	now := time.Now()
	off := o.offsetNow() // Redis's clock, as every other time the admin API shows
	rec := queue.BreakerRecord{Drainer: d.cfg.Owner, State: s.State.String(), Since: s.Since.Add(off),
		Expires: now.Add(off + breakerRecordTTL)}
	if !s.NextProbe.IsZero() {
		rec.NextProbe = s.NextProbe.Add(off)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), postTimeout)
	defer cancel()
	if err := d.cfg.Scheduler.Steering.SetBreaker(ctx, o.name, rec); err != nil {
		if d.redisLog.allow() {
			d.log.Warn("breaker state not published: the admin API shows it late", "rule", o.name, "state", rec.State, "err", err)
		}
		return
	}
	o.pub.last, o.pub.open = now, s.State != breaker.Closed
	d.log.Info("sink breaker", "rule", o.name, "state", rec.State, "next_probe", rec.NextProbe)
}

// refreshBreaker rewrites a breaker record that is not closed before it expires (called at
// each renewal: one check, a write every breakerRecordTTL/3 at most).
func (o *orule) refreshBreaker(now time.Time) {
	o.steerMu.Lock()
	b := o.brk
	o.steerMu.Unlock()
	if b == nil {
		return
	}
	o.pub.mu.Lock()
	due := o.pub.open && now.Sub(o.pub.last) > breakerRecordTTL/3
	o.pub.mu.Unlock()
	if due {
		go o.publishBreaker(b)
	}
}

// steerEntries encodes the adaptive state of the rule's throttled keys per owned partition
// (OwnRequest.Steer), for the keys' next owner. Caller holds o.mu.
func (o *orule) steerEntries() map[int]map[string]string {
	o.steerMu.Lock()
	lim := o.lim
	o.steerMu.Unlock()
	var out map[int]map[string]string
	if lim != nil && lim.Len() > 0 {
		for _, k := range o.keys {
			st, ok := lim.State(k.key)
			if !ok {
				continue
			}
			if out == nil {
				out = map[int]map[string]string{}
			}
			m := out[k.part.p]
			if m == nil {
				m = map[string]string{}
				out[k.part.p] = m
			}
			m[k.key] = encodeSteer(st, o.offset)
		}
	}
	for p, part := range o.parts {
		if out[p] == nil && part.steered {
			if out == nil {
				out = map[int]map[string]string{}
			}
			out[p] = map[string]string{} // clears what an earlier renewal wrote
		}
		part.steered = len(out[p]) > 0
	}
	return out
}

// restoreSteer gives the rule's limiter the states previous owners left for keys of the
// acquired partitions (acquire).
func (o *orule) restoreSteer(ctx context.Context, parts []int) {
	r := o.rule.Load()
	if r == nil || !r.Delivery.Adaptive.Enabled {
		return
	}
	lim, _ := o.steer(r)
	states, err := o.d.cfg.Scheduler.Steering.SteerStates(ctx, o.name, parts)
	if err != nil {
		o.d.log.Warn("own engine: adaptive states of the previous owner unreadable: throttled keys start again at the configured outflow",
			"rule", o.name, "partitions", parts, "err", err)
		return
	}
	now := time.Now()
	off := o.offsetNow()
	for key, v := range states {
		if st, ok := decodeSteer(v, off); ok {
			lim.Restore(key, st, now)
		}
	}

}

// encodeSteer: "share ceiling held" (held in µs on Redis's clock, 0 for none).
func encodeSteer(st adaptive.State, off time.Duration) string {
	var held int64
	if !st.Held.IsZero() {
		held = st.Held.Add(off).UnixMicro()
	}
	return strconv.FormatFloat(st.Share, 'g', 6, 64) + " " + strconv.FormatFloat(st.Ceiling, 'g', 6, 64) + " " + strconv.FormatInt(held, 10)
}

func decodeSteer(v string, off time.Duration) (adaptive.State, bool) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return adaptive.State{}, false
	}
	share, err1 := strconv.ParseFloat(f[0], 64)
	ceil, err2 := strconv.ParseFloat(f[1], 64)
	held, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return adaptive.State{}, false
	}
	st := adaptive.State{Share: share, Ceiling: ceil}
	if held > 0 {
		st.Held = time.UnixMicro(held).Add(-off)
	}
	return st, true
}

func (o *orule) steerEntriesLocked() map[int]map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.steerEntries()
}

// clearBreaker removes this drainer's breaker record of the rule when it stops (a stopped
// drainer's breaker pauses nothing) or when a rules reload replaced or removed the breaker.
func (o *orule) clearBreaker() {
	o.pub.mu.Lock()
	defer o.pub.mu.Unlock()
	if o.pub.last.IsZero() {
		return
	}
	o.steerMu.Lock()
	b := o.brk
	o.steerMu.Unlock()
	if b != nil && b.State() != breaker.Closed && !o.d.stopping() {
		return // a newer breaker is not closed and published its own record
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.d.runCtx), postTimeout)
	defer cancel()
	_ = o.d.cfg.Scheduler.Steering.ClearBreaker(ctx, o.name, o.d.cfg.Owner) // else it expires
	o.pub.last, o.pub.open = time.Time{}, false
}
