package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// TestRedisMemoryReport measures what the scheduler costs in Redis per due key (1M keys of
// 16 bytes, e.g. "merchant-0000042") and per claimed key. Run with SLUICE_BENCH=1.
func TestRedisMemoryReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to run reports")
	}
	const n = 1_000_000
	c := redistest.Shared(t).Client(t)
	prefix := redistest.Prefix(t)
	s, err := queue.NewScheduler(c, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := usedMemory(t, c)
	now := time.Now()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([]string, 0, 1000)
			for i := w * (n / 8); i < (w+1)*(n/8); i++ {
				keys = append(keys, fmt.Sprintf("merchant-%07d", i))
				if len(keys) == cap(keys) {
					if _, err := s.MarkDueAt(ctx, "mem", now.Add(time.Duration(i)*time.Microsecond), keys...); err != nil {
						t.Error(err)
						return
					}
					keys = keys[:0]
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(begin)
	after := usedMemory(t, c)
	due := prefix + "sl:{mem}:due"
	usage, err := c.MemoryUsage(ctx, due, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1M due keys of 16 bytes: used_memory +%.1f B/key, MEMORY USAGE of the due set %.1f B/key; MarkDue %.0f keys/s in batches of 1000",
		float64(after-before)/n, float64(usage)/n, n/took.Seconds())

	// Claimed keys carry a lease entry and a holder entry on top.
	const claimed = 10_000
	before = usedMemory(t, c)
	for got := 0; got < claimed; {
		cl, err := s.Claim(ctx, "mem", now.Add(2*time.Second), queue.ClaimRequest{Owner: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Max: 1000, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got += len(cl.Claims)
	}
	after = usedMemory(t, c)
	t.Logf("claimed keys: used_memory %+.1f B/key (lease + holder entries, minus the due entry)", float64(after-before)/claimed)
	if err := s.DeleteRule(ctx, "mem"); err != nil {
		t.Fatal(err)
	}
}
