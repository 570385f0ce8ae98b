package drain_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// ownersOf reads the rule's ownership leases: partition -> owner.
func (e *env) ownersOf(rule string) map[int]string {
	e.t.Helper()
	m, err := e.rdb.HGetAll(context.Background(), e.prefix+"sl:{"+queue.RuleToken(rule)+".own}:leases").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int]string{}
	for p, v := range m {
		var n int
		for _, c := range p {
			n = n*10 + int(c-'0')
		}
		out[n] = strings.Fields(v)[0]
	}
	return out
}

// TestSteerAdaptiveHandoverOwnEngine: a rule at 20/s per key with delivery.adaptive against
// a real HTTP sink that admits 5/s per key. Drainer A alone lowers every key to about 5/s;
// then drainer B starts and takes over half the ownership partitions. The keys that moved go
// on at their lowered outflow on B (A handed their adaptive state over with the pace
// entries): no two attempts of a moved key come closer than its lowered interval allows.
// Without the handover each moved key starts at 20/s again (50 ms apart) until refused.
func TestSteerAdaptiveHandoverOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs, _ := sinktest.StartLimited(t, 5, time.Second)
	r := e.rule("handover", 20, 0, func(r *rules.Rule) {
		r.Sink.URL = hs.URL
		r.Delivery.Adaptive = rules.Adaptive{Enabled: true}
		r.Delivery.MaxAttempts = 1000
	})
	keys := keyNames(16)
	e.publish(r, keys, 120)
	httpSink, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.drainer(ctx, httpSink, func(c *drain.Config) { ownEngine(c); c.Owner = "drainer-a" })
	start := time.Now()
	waittest.Eventually(t, time.Minute, "12 s of drainer A alone", func() bool { return time.Since(start) > 12*time.Second })
	before := sinktest.Counts{}
	for _, k := range keys {
		c := hs.CountsSince(k, time.Now().Add(-3*time.Second))
		before.Accepted += c.Accepted
		before.Throttled += c.Throttled
	}
	e.drainer(ctx, httpSink, func(c *drain.Config) { ownEngine(c); c.Owner = "drainer-b" })
	var moved []string
	var at time.Time
	waittest.Eventually(t, 20*time.Second, "drainer B owns partitions", func() bool {
		owners := e.ownersOf(r.Name)
		moved = moved[:0]
		for _, k := range keys {
			if owners[queue.OwnPartitionOf(k, queue.DefaultOwnPartitions)] == "drainer-b" {
				moved = append(moved, k)
			}
		}
		at = time.Now()
		return len(moved) > 0
	})
	waittest.Eventually(t, 20*time.Second, "3 s after the move", func() bool { return time.Since(at) > 3*time.Second })
	var after sinktest.Counts
	for _, k := range moved {
		c := hs.CountsSince(k, at)
		after.Accepted += c.Accepted
		after.Throttled += c.Throttled
	}
	// The closest two attempts of a moved key, from 1 s before the move (its last ones on A)
	// to 3 s after (its first ones on B).
	minGap := time.Hour
	last := map[string]time.Time{}
	for _, d := range hs.All() {
		if !slices.Contains(moved, d.Key) || d.At.Before(at.Add(-time.Second)) {
			continue
		}
		if p, ok := last[d.Key]; ok {
			minGap = min(minGap, d.At.Sub(p))
		}
		last[d.Key] = d.At
	}
	perKey := float64(after.Accepted+after.Throttled) / 3 / float64(len(moved))
	t.Logf("before the move (all 16 keys, last 3 s on A): %d accepted, %d answered 429", before.Accepted, before.Throttled)
	t.Logf("%d keys moved to B; in the 3 s after: %d accepted, %d answered 429, %.1f attempts/s per key (rule 20/s, sink 5/s)",
		len(moved), after.Accepted, after.Throttled, perKey)
	t.Logf("closest two attempts of a moved key across the move: %v (the sink's 5/s is 200ms apart, the rule's 20/s 50ms)", minGap)
	// Converged keys go at most at the sink's 5/s (200 ms); a new owner that started them
	// afresh sends them at the rule's 20/s (50 ms apart) until the sink refuses again.
	if minGap < 120*time.Millisecond {
		t.Errorf("two attempts of a moved key %v apart around the move, want ≥ 120ms: the new owner raised it back toward 20/s", minGap)
	}
}
