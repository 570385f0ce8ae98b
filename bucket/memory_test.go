package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bucket"
)

// TestMemoryEvictsIdleKeys: keys whose state has become equivalent to no state are
// dropped, by Sweep or by the periodic sweep inside Allow, in the callers' time.
func TestMemoryEvictsIdleKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := bucket.NewMemory(bucket.MemoryConfig{Shards: 1, SweepInterval: time.Minute})
	short := []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 10, Interval: time.Second}}
	long := []bucket.Limit{{Algorithm: bucket.SlidingWindowCounter, Rate: 10, Interval: time.Hour}}
	for i := 0; i < 1000; i++ {
		m.Allow(ctx, itoa(i), short, 1, t0)
	}
	m.Allow(ctx, "daily", long, 1, t0)
	if n := m.Len(); n != 1001 {
		t.Fatalf("Len %d, want 1001", n)
	}
	// 10 tokens refill in 1s; the window counter keeps its state for two windows.
	if n := m.Sweep(t0.Add(999 * ms)); n != 0 {
		t.Fatalf("swept %d keys before they were idle", n)
	}
	if n := m.Sweep(t0.Add(2 * time.Second)); n != 1000 || m.Len() != 1 {
		t.Fatalf("swept %d, Len %d; want 1000, 1", n, m.Len())
	}
	// The periodic sweep: the next Allow after SweepInterval drops idle keys itself.
	for i := 0; i < 10; i++ {
		m.Allow(ctx, itoa(i), short, 1, t0.Add(2*time.Second))
	}
	m.Allow(ctx, "other", short, 1, t0.Add(2*time.Hour+time.Second))
	if n := m.Len(); n != 1 {
		t.Fatalf("Len %d after the periodic sweep, want 1 (the key just used)", n)
	}
	// An evicted key starts afresh, exactly as if it had been kept.
	if r, _ := m.Allow(ctx, "daily", long, 10, t0.Add(3*time.Hour)); !r.Allowed {
		t.Fatalf("evicted key denied: %+v", r)
	}
}

// TestMemoryZeroAllocs: the hot path allocates nothing once a key exists.
func TestMemoryZeroAllocs(t *testing.T) {
	ctx := context.Background()
	m := bucket.NewMemory(bucket.MemoryConfig{})
	for _, alg := range allAlgorithms {
		limits := []bucket.Limit{{Algorithm: alg, Rate: 100, Interval: time.Second}, {Rate: 1000, Interval: time.Hour, Shadow: true}}
		now := t0
		key := "k" + string(alg)
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			m.Allow(ctx, key, limits, 1, now)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per decision, want 0", alg, allocs)
		}
	}
}
