package drain

// Maintenance: the periodic loop that samples queue depths and reconciles each rule's
// schedule with its stream.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// maintain samples queue depths and reconciles every rule's schedule with its stream.
func (d *Drainer) maintain() {
	defer d.loops.Done()
	type last struct {
		depth, reconcile, force time.Time
		suspect                 bool // the last check saw more keys in the stream than scheduled
	}
	lasts := map[string]*last{}
	var lastStore time.Time
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
		d.ownMu.Lock()
		for _, o := range d.orules {
			rs = append(rs, o.rule.Load())
		}
		d.ownMu.Unlock()
		now := d.cfg.Clock()
		d.m.heartbeat.Set(float64(time.Now().UnixMilli()) / 1e3)
		if now.Sub(lastStore) >= d.cfg.DepthEvery {
			lastStore = now
			ctx, cancel := context.WithTimeout(d.runCtx, time.Minute)
			d.sampleStore(ctx)
			cancel()
		}
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
					// The same stream info: the oldest message's store time costs nothing more.
					d.m.oldest.WithLabelValues(r.Name).Set(oldestAge(time.Now(), st.Oldest))
				}
			}
			// The own engine does not read the scheduler's due marks: it finds work itself
			// (notices, repair listings), so there is nothing to reconcile.
			if d.cfg.Engine != EngineOwn && d.cfg.ReconcileEvery > 0 && now.Sub(l.reconcile) >= d.cfg.ReconcileEvery {
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
