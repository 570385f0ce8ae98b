package bucket_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/redistest"
)

var allAlgorithms = []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindowLog, bucket.SlidingWindowCounter}

// TestRedisConcurrentNeverOverAdmits: 64 goroutines hammer one key at one instant;
// exactly the limit is admitted, whatever the interleaving.
func TestRedisConcurrentNeverOverAdmits(t *testing.T) {
	t.Parallel()
	clients := map[string]func(t *testing.T) redis.Scripter{
		"single": func(t *testing.T) redis.Scripter {
			opts := redistest.Shared(t).Options()
			opts.PoolSize = 64
			c := redis.NewClient(opts)
			t.Cleanup(func() { c.Close() })
			return c
		},
		// On a cluster the batches of different keys are pipelines split by node.
		"cluster": func(t *testing.T) redis.Scripter {
			opts := redistest.SharedCluster(t).Options()
			opts.PoolSize = 64
			c := redis.NewClusterClient(opts)
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	for cname, newClient := range clients {
		t.Run(cname, func(t *testing.T) {
			t.Parallel()
			s, err := bucket.NewRedis(newClient(t), bucket.RedisConfig{Prefix: redistest.Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			concurrentNeverOverAdmits(t, s)
		})
	}
}

func concurrentNeverOverAdmits(t *testing.T, s *bucket.Redis) {
	cases := map[string][]bucket.Limit{}
	for _, alg := range allAlgorithms {
		cases[string(alg)] = []bucket.Limit{{Algorithm: alg, Rate: 100, Interval: time.Hour}}
	}
	// Envoy's counting (a counter per window, INCRBY): exactly the limit passes too.
	cases["fixed_window counting over"] = []bucket.Limit{{Rate: 100, Interval: time.Hour, CountOver: true}}
	// Two limits: the tighter one decides and neither may drift.
	cases["token+log"] = []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 70, Interval: time.Hour}, {Algorithm: bucket.SlidingWindowLog, Rate: 100, Interval: time.Hour}}
	for name, limits := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 5; i++ {
						// Everyone within the same window: the time passed in is fixed.
						r, err := s.Allow(context.Background(), "hot-"+name, limits, 1, t0.Add(time.Duration(i)*ms))
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			want := limits[0].Rate
			if got := allowed.Load(); got != want {
				t.Fatalf("allowed %d of 320, want exactly %d", got, want)
			}
		})
	}
}

// TestRedisKeysExpire: every key the store writes carries a TTL no longer than the
// state needs plus the slack, and keys share one hash tag.
func TestRedisKeysExpire(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	prefix := redistest.Prefix(t)
	const slack = 10 * time.Millisecond
	s, err := bucket.NewRedis(c, bucket.RedisConfig{Prefix: prefix, TTLSlack: slack})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Rate: 10, Interval: time.Second},
		{Algorithm: bucket.FixedWindow, Rate: 100, Interval: time.Minute},
		{Algorithm: bucket.SlidingWindowLog, Rate: 100, Interval: 10 * time.Second},
		{Algorithm: bucket.SlidingWindowCounter, Rate: 100, Interval: time.Hour},
	}
	// The longest TTL each key may need: time to refill / end of window / newest entry
	// leaving / the next window no longer weighing this one (we are at t0+30s).
	maxTTL := []time.Duration{300 * ms, 30 * time.Second, 10 * time.Second, 2*time.Hour - 30*time.Second}
	if _, err := s.Allow(ctx, "m-42}{x", limits, 3, t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys("m-42}{x", limits)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if !strings.HasPrefix(k, prefix+"{m-42}{x}:") {
			t.Errorf("key %q lacks the shared hash tag", k)
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > maxTTL[i]+slack {
			t.Errorf("%s: pttl %v (%v), want in (0, %v]", k, ttl, err, maxTTL[i]+slack)
		}
	}
	// Nothing under the prefix lives forever.
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	n := 0
	for iter.Next(ctx) {
		n++
		if ttl := c.PTTL(ctx, iter.Val()).Val(); ttl < 0 {
			t.Errorf("%s has no TTL", iter.Val())
		}
	}
	if n != len(limits) {
		t.Errorf("%d keys under the prefix, want %d", n, len(limits))
	}
}

func TestNewRedisRejectsBracedPrefix(t *testing.T) {
	t.Parallel()
	if _, err := bucket.NewRedis(redistest.Shared(t).Client(t), bucket.RedisConfig{Prefix: "a{b}:"}); !errors.Is(err, bucket.ErrInvalid) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
}

// TestDegradedFallsBackAndRecovers stops Redis under a Degraded store: decisions
// continue locally at the limit divided by the process count, and Redis is used again
// once it is back and the probe interval has passed (in the callers' time).
func TestDegradedFallsBackAndRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{TCP: true})
	opts := srv.Options()
	opts.ContextTimeoutEnabled, opts.MaxRetries, opts.DialTimeout = true, -1, 100*time.Millisecond
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	primary, err := bucket.NewRedis(c, bucket.RedisConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changes []bool
	d := bucket.NewDegraded(primary, bucket.DegradedConfig{
		Processes: 2, ProbeInterval: 5 * time.Second,
		OnChange: func(degraded bool, err error) {
			mu.Lock()
			changes = append(changes, degraded)
			mu.Unlock()
			if degraded && err == nil {
				t.Error("entering degraded mode without the error")
			}
		},
	})
	ctx := context.Background()
	limits := []bucket.Limit{{Rate: 10, Interval: time.Hour}}
	allowN := func(at time.Time, n int) (allowed int) {
		for i := 0; i < n; i++ {
			r, err := d.Allow(ctx, "k", limits, 1, at)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				allowed++
			}
		}
		return allowed
	}
	if got := allowN(t0, 4); got != 4 || d.InDegradedMode() {
		t.Fatalf("healthy: allowed %d, degraded %v", got, d.InDegradedMode())
	}
	srv.Stop()
	// Two processes share 10/h while Redis is away: 5 each.
	if got := allowN(t0.Add(time.Second), 8); got != 5 || !d.InDegradedMode() {
		t.Fatalf("degraded: allowed %d of 8, want 5; degraded %v", got, d.InDegradedMode())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Before the probe interval the store stays local (and denies); after it, Redis
	// (restarted empty, without persistence) decides again.
	if got := allowN(t0.Add(2*time.Second), 1); got != 0 || !d.InDegradedMode() {
		t.Fatalf("before probe: allowed %d, degraded %v", got, d.InDegradedMode())
	}
	if got := allowN(t0.Add(10*time.Second), 1); got != 1 || d.InDegradedMode() {
		t.Fatalf("after probe: allowed %d, degraded %v", got, d.InDegradedMode())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Fatalf("OnChange calls %v, want [true false]", changes)
	}
}

// TestDegradedNeverHangs: a Redis that accepts connections and never answers costs
// one Timeout, then decisions are local and immediate.
func TestDegradedNeverHangs(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		for {
			conn, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, conn) // never read, never answer
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	primary, err := bucket.NewRedis(c, bucket.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	d := bucket.NewDegraded(primary, bucket.DegradedConfig{Timeout: 50 * time.Millisecond})
	limits := []bucket.Limit{{Rate: 10, Interval: time.Second}}
	start := time.Now()
	for i := 0; i < 100; i++ {
		if _, err := d.Allow(context.Background(), "k", limits, 1, t0); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el > 2*time.Second || !d.InDegradedMode() {
		t.Fatalf("100 decisions took %v (degraded %v); want one 50ms timeout, then local", el, d.InDegradedMode())
	}
}

func TestDegradedPassesInvalidInputThrough(t *testing.T) {
	t.Parallel()
	d := bucket.NewDegraded(newRedisStore(t), bucket.DegradedConfig{})
	_, err := d.Allow(context.Background(), "k", []bucket.Limit{{Rate: 0, Interval: time.Second}}, 1, t0)
	if !errors.Is(err, bucket.ErrInvalid) || d.InDegradedMode() {
		t.Fatalf("err %v degraded %v; want ErrInvalid and not degraded", err, d.InDegradedMode())
	}
}

// countHook counts the commands a client sends.
type countHook struct{ names []string }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.names = append(h.names, cmd.Name())
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisOneRoundTripPerDecision: a decision over several limits is one EVALSHA
// (plus one EVAL the first time a server has not seen the script).
func TestRedisOneRoundTripPerDecision(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	hook := &countHook{}
	c.AddHook(hook)
	s, err := bucket.NewRedis(c, bucket.RedisConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Rate: 10, Interval: time.Second},
		{Algorithm: bucket.SlidingWindowLog, Rate: 100, Interval: time.Minute},
		{Algorithm: bucket.SlidingWindowCounter, Rate: 250, Interval: 24 * time.Hour, Shadow: true},
	}
	for i := 0; i < 20; i++ {
		if _, err := s.Allow(context.Background(), "k", limits, 1, t0.Add(time.Duration(i)*ms)); err != nil {
			t.Fatal(err)
		}
	}
	evalsha, eval, other := 0, 0, 0
	for _, name := range hook.names {
		switch name {
		case "evalsha":
			evalsha++
		case "eval": // after the one NOSCRIPT answer a fresh server gives
			eval++
		case "hello", "client": // the connection's handshake, once
		default:
			other++
		}
	}
	if evalsha != 20 || eval > 1 || other != 0 {
		t.Fatalf("commands sent: %v; want 20 evalsha (and at most one eval)", hook.names)
	}
}

// TestRedisBatchesSurviveScriptFlush: overlapping decisions are pipelined; when the
// server has lost the script (a restart, SCRIPT FLUSH) every batched call still gets
// its own correct answer, and the limit still holds exactly.
func TestRedisBatchesSurviveScriptFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	opts := srv.Options()
	opts.PoolSize = 32
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	s, err := bucket.NewRedis(c, bucket.RedisConfig{Prefix: redistest.Prefix(t), Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	limits := []bucket.Limit{{Algorithm: bucket.SlidingWindowLog, Rate: 50, Interval: time.Hour}, {Rate: 1000, Interval: time.Hour}}
	for round := 0; round < 2; round++ {
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 4; i++ {
					r, err := s.Allow(context.Background(), "k"+itoa(round), limits, 1, t0)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 50 {
			t.Fatalf("round %d: allowed %d of 128, want 50", round, got)
		}
	}
}
