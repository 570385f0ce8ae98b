package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
					if _, err := s.Claims.MarkDueAt(ctx, "mem", now.Add(time.Duration(i)*time.Microsecond), keys...); err != nil {
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
		cl, err := s.Claims.Claim(ctx, "mem", now.Add(2*time.Second), queue.ClaimRequest{Owner: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Max: 1000, Lease: time.Minute})
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

// TestPartitionClaimReport measures the claim throughput of one rule (keys claimed and
// released per second, 8 drainers claiming up to 32 keys each call, 10,000 unpaced keys) on
// a single redis-server and on a 3-master Redis Cluster with the rule in 1 partition (one
// master does all the work) and in 8 (every master does part). All servers share this
// machine's cores, so wall-clock keys/s says little about a cluster; it also reports the
// CPU time of the busiest master per claimed key (INFO cpu), which bounds what the rule can
// do with a core per master: capacity = 1 / (busiest master's CPU seconds per key).
// Run with SLUICE_BENCH=1.
func TestPartitionClaimReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to run reports")
	}
	single := redistest.Shared(t)
	cluster := redistest.SharedCluster(t)
	var masters []*redis.Client
	for _, m := range cluster.Masters {
		masters = append(masters, m.Client(t))
	}
	for _, tc := range []struct {
		name    string
		rdb     redis.UniversalClient
		masters []*redis.Client
		parts   int
	}{
		{"single-p1", single.Client(t), []*redis.Client{single.Client(t)}, 1},
		{"single-p8", single.Client(t), []*redis.Client{single.Client(t)}, 8},
		{"cluster-1-master-p1", cluster.Client(t), masters, 1},
		{"cluster-3-masters-p8", cluster.Client(t), masters, 8},
	} {
		before := cpuSeconds(t, tc.masters)
		keys, rate := claimThroughput(t, tc.rdb, tc.parts, 3*time.Second)
		after := cpuSeconds(t, tc.masters)
		busiest, busy := 0.0, 0
		for i := range before {
			if d := after[i] - before[i]; d > 0.02 { // replicas and idle masters use ~0
				busy++
				busiest = max(busiest, d)
			}
		}
		// As integration's report(): "BENCH name value".
		t.Logf("BENCH partition-claims-per-second-%s %.0f", tc.name, rate)
		t.Logf("BENCH partition-claims-per-busiest-master-cpu-second-%s %.0f", tc.name, float64(keys)/busiest)
		t.Logf("%s: %d keys in %s, %d masters busy", tc.name, keys, 3*time.Second, busy)
	}
}

// cpuSeconds reads used_cpu_user + used_cpu_sys of each server.
func cpuSeconds(t *testing.T, cs []*redis.Client) []float64 {
	t.Helper()
	out := make([]float64, len(cs))
	for i, c := range cs {
		info, err := c.Info(context.Background(), "cpu").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					out[i] += x
				}
			}
		}
	}
	return out
}

func claimThroughput(t *testing.T, rdb redis.UniversalClient, parts int, d time.Duration) (int64, float64) {
	t.Helper()
	ctx := context.Background()
	prefix := redistest.Prefix(t) + strconv.Itoa(parts) + "-"
	newS := func() *queue.Scheduler {
		s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix, Partitions: func(string) int { return parts }})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("merchant-%06d", i)
	}
	if _, err := newS().Claims.MarkDueAt(ctx, "bench", time.Time{}, keys...); err != nil {
		t.Fatal(err)
	}
	var total atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newS()
			owner := "d" + strconv.Itoa(w)
			var rels []queue.Release
			for time.Now().Before(stop) {
				c, err := s.Claims.Claim(ctx, "bench", time.Time{}, queue.ClaimRequest{Owner: owner, Max: 32, Lease: time.Minute, Releases: rels})
				if err != nil {
					t.Error(err)
					return
				}
				rels = rels[:0]
				for _, cl := range c.Claims {
					rels = append(rels, queue.Release{Key: cl.Key, Mode: queue.Released, Fence: cl.Fence})
				}
				total.Add(int64(len(c.Claims)))
			}
			s.Claims.Release(ctx, "bench", owner, 0, rels...)
		}()
	}
	wg.Wait()
	newS().DeleteRule(ctx, "bench")
	return total.Load(), float64(total.Load()) / d.Seconds()
}
