package drain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// TestOneRuleOverTheClusterEndToEnd: two drainers deliver one rule's 1,000 keys from a
// 3-master Redis Cluster (the rule in its default 8 partitions): every master holds part of
// the rule's state, each key's messages arrive in order and at most at its outflow, none is
// lost or delivered twice — on each engine (own: its leases, fencing counter, pacing and
// retry state live under the rule's own hash tag, on one master of the cluster).
func TestOneRuleOverTheClusterEndToEnd(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{drain.EngineOwn, drain.EngineClaim} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			testOneRuleOverTheCluster(t, engine)
		})
	}
}

func testOneRuleOverTheCluster(t *testing.T, engine string) {
	e := newEnv(t)
	c := redistest.SharedCluster(t)
	s, err := queue.NewScheduler(c.Client(t), queue.SchedulerConfig{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	const keys, per, outflow = 1000, 3, 20 // 20/s per key: 50 ms apart
	r := e.rule("spread", outflow, 0, nil)
	if p := s.Partitions(r.Name); p != queue.ClusterPartitions {
		t.Fatalf("partitions on a cluster: %d, want %d", p, queue.ClusterPartitions)
	}
	want := map[string][]string{}
	for i := range per {
		for k := range keys {
			key := fmt.Sprintf("merchant-%04d", k)
			m := e.enqueue(r, key, fmt.Sprintf("%d", i))
			want[key] = append(want[key], m.ID)
		}
	}
	ctx := context.Background()
	perMaster := make([]int, len(c.Masters))
	for i, m := range c.Masters {
		ks, err := m.Client(t).Keys(ctx, e.prefix+"sl:{spread*").Result()
		if err != nil {
			t.Fatal(err)
		}
		perMaster[i] = len(ks)
		if len(ks) == 0 {
			t.Errorf("master %d holds none of the rule's state", i)
		}
	}
	t.Logf("rule's Redis keys per master: %v", perMaster)
	sink := &recSink{}
	var ds []*drain.Drainer
	for range 2 {
		ds = append(ds, e.drainer(ctx, sink, func(c *drain.Config) { c.Engine = engine; c.Workers = 64 }))
	}
	waittest.Eventually(t, 60*time.Second, "3,000 deliveries", func() bool { return sink.count() >= keys*per })
	waittest.Eventually(t, 10*time.Second, "empty queue", func() bool { return e.depth(r) == 0 })
	// The claim engine releases an emptied key from the due set at once; the own engine does
	// not read the ingress's due marks but removes those of emptied keys with its next renewal.
	var due, claimed int64
	if !waittest.Within(5*time.Second, func() bool {
		due, claimed, err = s.Claims.Counts(ctx, r.Name)
		return err == nil && due == 0
	}) {
		t.Errorf("after draining: due %d claimed %d, %v", due, claimed, err)
	}
	// A duplicate would have arrived once both drainers have stopped (every delivery done).
	for _, d := range ds {
		d.Stop()
	}
	got := map[string][]delivery{}
	seen := map[string]bool{}
	for _, d := range sink.deliveries() {
		if seen[d.ID] {
			t.Errorf("message %s delivered twice", d.ID)
		}
		seen[d.ID] = true
		got[d.Key] = append(got[d.Key], d)
	}
	// Deliveries leave at their slots; the sink sees them with the scheduling jitter of a
	// loaded machine, so the spacing bound is 80 % of the interval.
	minGap := time.Second / outflow * 8 / 10
	for key, ids := range want {
		ds := got[key]
		if len(ds) != len(ids) {
			t.Errorf("key %q: %d deliveries, want %d", key, len(ds), len(ids))
			continue
		}
		for j, d := range ds {
			if d.ID != ids[j] {
				t.Errorf("key %q: delivery %d is %s, want %s (FIFO)", key, j, d.ID, ids[j])
				break
			}
			if j > 0 && d.At.Sub(ds[j-1].At) < minGap {
				t.Errorf("key %q: deliveries %d and %d %v apart at outflow %d/s", key, j-1, j, d.At.Sub(ds[j-1].At), outflow)
			}
		}
	}
}
