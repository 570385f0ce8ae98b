package process

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// countingSink counts the deliveries its sink accepted, per rule, and adds them to the
// cluster-wide counts in Redis once a second (queue.Scheduler.Rates.AddDelivered), which the
// admin API's drained_per_second reads — the same figure whichever ingress is asked.
type countingSink struct {
	delivery.Sink
	mu     sync.Mutex
	counts map[string]int64
}

func (c *countingSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) delivery.Outcome {
	out := c.Sink.Deliver(ctx, r, m)
	if out.Verdict == delivery.Delivered {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[string]int64{}
		}
		c.counts[r.Name]++
		c.mu.Unlock()
	}
	return out
}

// flush writes the counts every second until ctx ends (and once more then).
func (c *countingSink) flush(ctx context.Context, s *queue.Scheduler, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastErr time.Time
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		c.mu.Lock()
		counts := c.counts
		c.counts = nil
		c.mu.Unlock()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := s.Rates.AddDelivered(wctx, counts, time.Now()); err != nil && time.Since(lastErr) > time.Minute {
			lastErr = time.Now()
			log.Warn("drainer: delivery counts not written (admin drained/s undercounts)", "err", err)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}
