package bucket_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/loadtest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// The Redis store against github.com/go-redis/redis_rate/v10 on the same private
// redis-server and the same client: both run one EVALSHA of a GCRA per decision, so
// ours uses leaky_bucket (our GCRA) with the same rate and burst. The limit is high
// enough that every request is allowed and both scripts write.

const benchRate = 1_000_000 // per second

type redisPeer struct {
	name  string
	allow func(ctx context.Context, key string) error
}

func redisPeers(tb testing.TB) (*redis.Client, []redisPeer) {
	opts := redistest.Shared(tb).Options()
	opts.PoolSize = 128 // at least the goroutines, so nobody waits for a connection
	c := redis.NewClient(opts)
	tb.Cleanup(func() { c.Close() })
	// The default prefix, like redis_rate's own "rate:": the test prefixes are long and
	// key length shows at 100k keys. Nothing else runs while benchmarks do.
	ours, err := bucket.NewRedis(c, bucket.RedisConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	unbatched, err := bucket.NewRedis(c, bucket.RedisConfig{Batch: 1})
	if err != nil {
		tb.Fatal(err)
	}
	limits := []bucket.Limit{{Algorithm: bucket.LeakyBucket, Rate: benchRate, Burst: benchRate, Interval: time.Second}}
	peer := redis_rate.NewLimiter(c)
	peerLimit := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: time.Second}
	return c, []redisPeer{
		{"sluice", func(ctx context.Context, key string) error {
			r, err := ours.Allow(ctx, key, limits, 1, time.Now())
			if err == nil && !r.Allowed {
				err = fmt.Errorf("denied: %+v", r)
			}
			return err
		}},
		{"sluice-unbatched", func(ctx context.Context, key string) error {
			r, err := unbatched.Allow(ctx, key, limits, 1, time.Now())
			if err == nil && !r.Allowed {
				err = fmt.Errorf("denied: %+v", r)
			}
			return err
		}},
		{"redis_rate", func(ctx context.Context, key string) error {
			r, err := peer.Allow(ctx, key, peerLimit)
			if err == nil && r.Allowed == 0 {
				err = fmt.Errorf("denied: %+v", r)
			}
			return err
		}},
	}
}

// load runs allow from g goroutines, each over its own stride of keys, until ops
// decisions are done (ops > 0) or until the deadline; it returns decisions/s and p99.
func load(allow func(context.Context, string) error, g int, keys []string, ops int, until time.Time) (float64, time.Duration, error) {
	ctx := context.Background()
	return loadtest.Run(g, ops, until, func(w, i int) error { return allow(ctx, keys[(i*g+w)%len(keys)]) })
}

var benchKeyCounts = []int{1, 100_000}
var benchGoroutines = []int{1, 16, 64}

func BenchmarkRedis(b *testing.B) {
	_, peers := redisPeers(b)
	for _, nk := range benchKeyCounts {
		keys := benchKeys(nk)
		for _, g := range benchGoroutines {
			for _, p := range peers {
				b.Run(fmt.Sprintf("%s/keys=%d/g=%d", p.name, nk, g), func(b *testing.B) {
					b.ReportAllocs()
					opsPerSec, p99, err := load(p.allow, g, keys, b.N, time.Time{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(opsPerSec, "ops/s")
					b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
				})
			}
		}
	}
}

// TestBenchReport prints the Redis comparison as a table for humans (make bench): each
// cell runs both stores for the same wall time, interleaved in quarters so that load
// from other processes on the machine hits both alike. p99 is the worst quarter's.
// "srv µs" is the server's own time per EVALSHA (INFO commandstats), which the other
// processes on a shared machine disturb much less than throughput and latency.
func TestBenchReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench) for the Redis comparison report")
	}
	const cell = 2 * time.Second
	c, peers := redisPeers(t)
	ctx := context.Background()
	t.Logf("Redis store (leaky_bucket, one EVALSHA per decision; overlapping decisions pipelined) vs redis_rate v10 (GCRA, one EVALSHA per decision); %v per store per cell", cell)
	t.Logf("unbatched = our store with RedisConfig.Batch 1 (one round trip per decision, like redis_rate)")
	t.Logf("%-6s %3s | %11s %11s %5s | %10s %9s %5s | %11s %5s | %6s %6s %5s", "keys", "g", "sluice op/s", "peer op/s", "ratio",
		"sluice p99", "peer p99", "ratio", "unbatched/s", "ratio", "srv µs", "peer", "ratio")
	for _, nk := range benchKeyCounts {
		keys := benchKeys(nk)
		for _, g := range benchGoroutines {
			var rate, srv [3]float64
			var p99 [3]time.Duration
			for quarter := 0; quarter < 4; quarter++ {
				for i, p := range peers {
					c.ConfigResetStat(ctx)
					r, q, err := load(p.allow, g, keys, 0, time.Now().Add(cell/4))
					if err != nil {
						t.Fatalf("%s: %v", p.name, err)
					}
					rate[i] += r / 4
					p99[i] = max(p99[i], q)
					srv[i] += evalshaMicros(ctx, c) / 4
				}
			}
			// peers: 0 sluice, 1 sluice-unbatched, 2 redis_rate
			t.Logf("%-6d %3d | %11.0f %11.0f %4.2fx | %10v %9v %4.2fx | %11.0f %4.2fx | %6.2f %6.2f %4.2fx", nk, g,
				rate[0], rate[2], rate[0]/rate[2],
				p99[0].Round(time.Microsecond), p99[2].Round(time.Microsecond), float64(p99[0])/float64(p99[2]),
				rate[1], rate[1]/rate[2],
				srv[1], srv[2], srv[1]/srv[2])
		}
	}
	t.Logf("ratios: ours / redis_rate (op/s: higher is better; p99 and server µs per EVALSHA, unbatched: lower is better)")
}

// evalshaMicros reads the server's mean time per EVALSHA since the last CONFIG RESETSTAT.
func evalshaMicros(ctx context.Context, c *redis.Client) float64 {
	info := c.Info(ctx, "commandstats").Val()
	i := strings.Index(info, "cmdstat_evalsha:")
	if i < 0 {
		return 0
	}
	line := info[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	for _, f := range strings.Split(line[len("cmdstat_evalsha:"):], ",") {
		if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
			x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return x
		}
	}
	return 0
}
