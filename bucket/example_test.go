package bucket_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
)

// Two limits on one key, decided together: 2 per second and 3 per minute.
func ExampleNewMemory() {
	store := bucket.NewMemory(bucket.MemoryConfig{})
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Rate: 2, Interval: time.Second, Name: "burst"},
		{Algorithm: bucket.SlidingWindowCounter, Rate: 3, Interval: time.Minute, Name: "per-minute"},
	}
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 4; i++ {
		r, err := store.Allow(context.Background(), "orders/m-42", limits, 1, now.Add(time.Duration(i)*time.Second))
		if err != nil {
			panic(err)
		}
		d := r.Decision()
		fmt.Printf("+%ds allowed=%v by %q remaining=%d retry=%v\n", i, r.Allowed, limits[r.Index].Name, d.Remaining, d.RetryAfter)
	}
	// Output:
	// +0s allowed=true by "burst" remaining=1 retry=0s
	// +1s allowed=true by "per-minute" remaining=1 retry=0s
	// +2s allowed=true by "per-minute" remaining=0 retry=0s
	// +3s allowed=false by "per-minute" remaining=0 retry=57.001s
}

// The rate-limit headers (docs/http-api.md "Rate-limit headers") from a Result.
func ExampleResult_Decision() {
	store := bucket.NewMemory(bucket.MemoryConfig{})
	limits := []bucket.Limit{{Rate: 5, Interval: time.Minute, Name: "login"}} // fixed window
	now := time.Date(2026, 1, 5, 12, 0, 20, 0, time.UTC)
	r, _ := store.Allow(context.Background(), "auth/login/alice", limits, 6, now)
	d := r.Decision()
	secs := func(x time.Duration) int64 { return int64(math.Ceil(x.Seconds())) }
	fmt.Printf("X-RateLimit-Limit: %d\n", d.Limit)
	fmt.Printf("X-RateLimit-Remaining: %d\n", d.Remaining)
	fmt.Printf("X-RateLimit-Reset: %d\n", secs(d.ResetAfter))
	fmt.Printf("RateLimit-Policy: %q;q=%d;w=%d\n", limits[r.Index].Name, d.Limit, secs(d.Window))
	fmt.Printf("RateLimit: %q;r=%d;t=%d\n", limits[r.Index].Name, d.Remaining, secs(d.ResetAfter))
	if d.RetryAfter == bucket.Never {
		fmt.Println("never: more hits than the limit allows at all")
	}
	r, _ = store.Allow(context.Background(), "auth/login/alice", limits, 5, now)
	r, _ = store.Allow(context.Background(), "auth/login/alice", limits, 1, now)
	fmt.Printf("allowed=%v Retry-After: %d\n", r.Allowed, max(1, secs(r.RetryAfter())))
	// Output:
	// X-RateLimit-Limit: 5
	// X-RateLimit-Remaining: 5
	// X-RateLimit-Reset: 0
	// RateLimit-Policy: "login";q=5;w=60
	// RateLimit: "login";r=5;t=0
	// never: more hits than the limit allows at all
	// allowed=false Retry-After: 40
}

// Shadow mode: the limit is reported, never enforced.
func ExampleLimit_shadow() {
	store := bucket.NewMemory(bucket.MemoryConfig{})
	limits := []bucket.Limit{{Algorithm: bucket.SlidingWindowLog, Rate: 1, Interval: time.Hour, Shadow: true}}
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	store.Allow(context.Background(), "k", limits, 1, now)
	r, _ := store.Allow(context.Background(), "k", limits, 1, now)
	fmt.Println(r.Allowed, r.ShadowDenied)
	// Output: true true
}

// A Redis store shared by every ingress process, behind the degraded-mode wrapper.
func ExampleNewDegraded() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		PoolSize:              64,   // at least the goroutines deciding at once
		ContextTimeoutEnabled: true, // so Degraded's Timeout bounds every call
	})
	shared, err := bucket.NewRedis(client, bucket.RedisConfig{Prefix: "sl:"})
	if err != nil {
		panic(err)
	}
	store := bucket.NewDegraded(shared, bucket.DegradedConfig{
		Processes: 3, // live ingress processes; update with SetProcesses
		OnChange: func(degraded bool, err error) {
			slog.Warn("admission limits", "degraded", degraded, "err", err)
		},
	})
	limits := []bucket.Limit{{Algorithm: bucket.SlidingWindowCounter, Rate: 5, Interval: 24 * time.Hour}}
	r, err := store.Allow(context.Background(), "messaging/marketing/u-7", limits, 1, time.Now())
	fmt.Println(r.Allowed, err, store.InDegradedMode())
}
