package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // zones from the binary, not the machine

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is aligned to the Unix epoch's minutes, hours and days, so windows start at t0.
var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// stores are the Store implementations every conformance case runs against.
var stores = []struct {
	name string
	new  func(t *testing.T) bucket.Store
}{
	{"memory", func(t *testing.T) bucket.Store { return bucket.NewMemory(bucket.MemoryConfig{}) }},
	{"redis", newRedisStore},
	{"cluster", newClusterStore},
}

func newRedisStore(t *testing.T) bucket.Store {
	t.Helper()
	s, err := bucket.NewRedis(redistest.Shared(t).Client(t), bucket.RedisConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newClusterStore is a Redis store on a real Redis Cluster (3 masters): every decision's
// keys must share one hash slot, and batches of decisions on different keys are pipelines
// that the cluster client splits by node.
func newClusterStore(t *testing.T) bucket.Store {
	t.Helper()
	s, err := bucket.NewRedis(redistest.SharedCluster(t).Client(t), bucket.RedisConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// step is one call at t0+at and what its headline decision (Result.Decision) must say.
type step struct {
	at        time.Duration
	n         int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
	check     func(t *testing.T, r bucket.Result) // extra checks, optional
}

type confCase struct {
	name   string
	limits []bucket.Limit
	steps  []step
}

func lim(alg bucket.Algorithm, rate int64, ivl time.Duration, burst int64) bucket.Limit {
	return bucket.Limit{Algorithm: alg, Rate: rate, Interval: ivl, Burst: burst}
}

var confCases = []confCase{
	{"token bucket refills continuously", []bucket.Limit{lim(bucket.TokenBucket, 10, time.Second, 0)}, []step{
		{at: 0, n: 10, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 0, n: 1, allowed: false, remaining: 0, retry: 100 * ms, reset: 100 * ms},
		{at: 250 * ms, n: 1, allowed: true, remaining: 1, reset: 50 * ms}, // 2.5 tokens − 1
		{at: 250 * ms, n: 5, allowed: false, remaining: 1, retry: 350 * ms, reset: 50 * ms},
		{at: 250 * ms, n: 11, allowed: false, remaining: 1, retry: bucket.Never, reset: 50 * ms},
		{at: 10 * time.Second, n: 0, allowed: true, remaining: 10, reset: 0}, // full again; a peek
	}},
	{"token bucket burst above rate", []bucket.Limit{lim(bucket.TokenBucket, 1, time.Second, 3)}, []step{
		{at: 0, n: 3, allowed: true, remaining: 0, reset: time.Second,
			check: func(t *testing.T, r bucket.Result) {
				if d := r.Decision(); d.Limit != 3 || d.Window != 3*time.Second {
					t.Errorf("limit %d window %v, want 3, 3s", d.Limit, d.Window)
				}
			}},
		{at: 999 * ms, n: 1, allowed: false, remaining: 0, retry: 1 * ms, reset: 1 * ms},
		{at: time.Second, n: 1, allowed: true, remaining: 0, reset: time.Second},
	}},
	{"leaky bucket meters at the rate", []bucket.Limit{lim(bucket.LeakyBucket, 10, time.Second, 5)}, []step{
		{at: 0, n: 5, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 50 * ms, n: 1, allowed: false, remaining: 0, retry: 50 * ms, reset: 50 * ms},
		{at: 100 * ms, n: 1, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 400 * ms, n: 2, allowed: true, remaining: 1, reset: 100 * ms},
		{at: 400 * ms, n: 6, allowed: false, remaining: 1, retry: bucket.Never, reset: 100 * ms},
	}},
	{"fixed window counts per window", []bucket.Limit{lim(bucket.FixedWindow, 5, time.Minute, 0)}, []step{
		{at: 0, n: 3, allowed: true, remaining: 2, reset: time.Minute,
			check: func(t *testing.T, r bucket.Result) {
				if d := r.Decision(); d.Limit != 5 || d.Window != time.Minute {
					t.Errorf("limit %d window %v, want 5, 1m", d.Limit, d.Window)
				}
			}},
		{at: 30 * time.Second, n: 3, allowed: false, remaining: 2, retry: 30 * time.Second, reset: 30 * time.Second},
		{at: 59999 * ms, n: 2, allowed: true, remaining: 0, reset: 1 * ms},
		{at: time.Minute, n: 5, allowed: true, remaining: 0, reset: time.Minute},
		{at: time.Minute, n: 6, allowed: false, remaining: 0, retry: bucket.Never, reset: time.Minute},
	}},
	{"default algorithm is fixed window", []bucket.Limit{{Rate: 1, Interval: time.Second}}, []step{
		{at: 0, n: 1, allowed: true, remaining: 0, reset: time.Second},
		{at: 500 * ms, n: 1, allowed: false, remaining: 0, retry: 500 * ms, reset: 500 * ms},
	}},
	{"sliding window log expires each hit", []bucket.Limit{lim(bucket.SlidingWindowLog, 3, 10*time.Second, 0)}, []step{
		{at: 0, n: 1, allowed: true, remaining: 2, reset: 10 * time.Second},
		{at: 2 * time.Second, n: 2, allowed: true, remaining: 0, reset: 8 * time.Second},
		{at: 5 * time.Second, n: 1, allowed: false, remaining: 0, retry: 5 * time.Second, reset: 5 * time.Second},
		{at: 10 * time.Second, n: 1, allowed: true, remaining: 0, reset: 2 * time.Second},
		{at: 11999 * ms, n: 2, allowed: false, remaining: 0, retry: 1 * ms, reset: 1 * ms},
		{at: 12 * time.Second, n: 4, allowed: false, remaining: 2, retry: bucket.Never, reset: 8 * time.Second},
	}},
	// The seed example: 7/min, 5 hits in the previous minute, 3 in this one; 30% into
	// this minute the estimate is 5 × 0.7 + 3 = 6.5, below 7, so one more passes.
	{"sliding window counter weighs the previous window", []bucket.Limit{lim(bucket.SlidingWindowCounter, 7, time.Minute, 0)}, []step{
		{at: -59 * time.Second, n: 5, allowed: true, remaining: 2, reset: 59*time.Second + 1*ms},
		{at: 0, n: 3, allowed: false, remaining: 2, retry: 1 * ms, reset: 1 * ms}, // ⌊5 × 1.0⌋ + 3 > 7
		{at: 1 * ms, n: 3, allowed: true, remaining: 0, reset: 12 * time.Second},  // ⌊5 × 0.99998⌋ + 3 = 7
	}},
	{"sliding window counter seed 5×0.7+3", []bucket.Limit{lim(bucket.SlidingWindowCounter, 7, time.Minute, 0)}, []step{
		{at: -30 * time.Second, n: 5, allowed: true, remaining: 2, reset: 30*time.Second + 1*ms},
		{at: 1 * time.Second, n: 3, allowed: true, remaining: 0, reset: 11*time.Second + 1*ms},
		{at: 18 * time.Second, n: 1, allowed: true, remaining: 0, reset: 6*time.Second + 1*ms}, // 6.5 → allowed
		{at: 18 * time.Second, n: 1, allowed: false, remaining: 0, retry: 6*time.Second + 1*ms, reset: 6*time.Second + 1*ms},
		{at: 24001 * ms, n: 1, allowed: true, remaining: 0, reset: 12 * time.Second},
		{at: 24001 * ms, n: 8, allowed: false, remaining: 0, retry: bucket.Never, reset: 12 * time.Second},
	}},
	{"all limits or none", []bucket.Limit{lim(bucket.TokenBucket, 10, time.Second, 0), lim(bucket.FixedWindow, 15, time.Minute, 0)}, []step{
		{at: 0, n: 10, allowed: true, remaining: 0, reset: 100 * ms, check: func(t *testing.T, r bucket.Result) {
			if r.Index != 0 || r.Decisions[1].Remaining != 5 {
				t.Errorf("index %d, fixed remaining %d; want 0, 5", r.Index, r.Decisions[1].Remaining)
			}
		}},
		// The bucket is full again but the window has 5 left: denied, and the bucket
		// must not lose its tokens.
		{at: time.Second, n: 10, allowed: false, remaining: 5, retry: 59 * time.Second, reset: 59 * time.Second, check: func(t *testing.T, r bucket.Result) {
			if r.Index != 1 || !r.Decisions[0].Allowed || r.Decisions[0].Remaining != 10 || r.Decisions[0].RetryAfter != 0 {
				t.Errorf("got %+v", r)
			}
		}},
		{at: time.Second, n: 5, allowed: true, remaining: 0, reset: 59 * time.Second, check: func(t *testing.T, r bucket.Result) {
			if r.Decisions[0].Remaining != 5 {
				t.Errorf("bucket remaining %d, want 5", r.Decisions[0].Remaining)
			}
		}},
	}},
	{"shadow limit reports but never denies", []bucket.Limit{
		{Algorithm: bucket.FixedWindow, Rate: 2, Interval: time.Minute, Shadow: true},
		lim(bucket.SlidingWindowLog, 100, time.Minute, 0),
	}, []step{
		{at: 0, n: 2, allowed: true, remaining: 98, reset: time.Minute},
		{at: 1 * time.Second, n: 1, allowed: true, remaining: 97, reset: 59 * time.Second, check: func(t *testing.T, r bucket.Result) {
			if !r.ShadowDenied || r.Decisions[0].Allowed || r.Decisions[0].RetryAfter != 59*time.Second || r.Index != 1 {
				t.Errorf("got %+v", r)
			}
		}},
	}},
	{"only shadow limits", []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 1, Interval: time.Second, Shadow: true}}, []step{
		{at: 0, n: 1, allowed: true, remaining: 0, reset: time.Second},
		{at: 0, n: 1, allowed: true, remaining: 0, retry: time.Second, reset: time.Second, check: func(t *testing.T, r bucket.Result) {
			if !r.ShadowDenied || r.Decisions[0].Allowed {
				t.Errorf("got %+v", r)
			}
		}},
	}},
	{"two limits with one algorithm and interval", []bucket.Limit{lim(bucket.FixedWindow, 3, time.Second, 0), lim(bucket.FixedWindow, 2, time.Second, 0)}, []step{
		{at: 0, n: 2, allowed: true, remaining: 0, reset: time.Second, check: func(t *testing.T, r bucket.Result) {
			if r.Index != 1 || r.Decisions[0].Remaining != 1 {
				t.Errorf("got %+v", r)
			}
		}},
		{at: 0, n: 1, allowed: false, remaining: 0, retry: time.Second, reset: time.Second},
	}},
	// envoy's hits_addend: counted even when over. 20 per minute, 15 left; 16 hits are
	// refused and counted, so the next single hit is refused too (all-or-nothing would
	// have left 15); a peek (n = 0) sees the count over the limit; the next window is new.
	{"count over: hits counted when refused, as envoy", []bucket.Limit{{Rate: 20, Interval: time.Minute, CountOver: true}}, []step{
		{at: 0, n: 5, allowed: true, remaining: 15, reset: time.Minute},
		{at: time.Second, n: 16, allowed: false, remaining: 0, retry: 59 * time.Second, reset: 59 * time.Second},
		{at: 2 * time.Second, n: 1, allowed: false, remaining: 0, retry: 58 * time.Second, reset: 58 * time.Second},
		{at: 3 * time.Second, n: 0, allowed: false, remaining: 0, retry: 57 * time.Second, reset: 57 * time.Second},
		{at: time.Minute, n: 20, allowed: true, remaining: 0, reset: time.Minute},
		{at: time.Minute, n: 0, allowed: true, remaining: 0, reset: time.Minute}, // exactly at the limit is not over
		{at: time.Minute, n: 25, allowed: false, remaining: 0, retry: bucket.Never, reset: time.Minute},
	}},
	{"count over beside an all-or-nothing limit", []bucket.Limit{{Rate: 2, Interval: time.Second, CountOver: true}, lim(bucket.FixedWindow, 10, time.Minute, 0)}, []step{
		{at: 0, n: 3, allowed: false, remaining: 0, retry: bucket.Never, reset: time.Second, check: func(t *testing.T, r bucket.Result) {
			if r.Decisions[1].Remaining != 10 { // refused: the other limit counted nothing
				t.Errorf("got %+v", r)
			}
		}},
		{at: 0, n: 0, allowed: false, remaining: 0, retry: time.Second, reset: time.Second}, // the 3 were counted
		{at: time.Second, n: 1, allowed: true, remaining: 1, reset: time.Second, check: func(t *testing.T, r bucket.Result) {
			if r.Decisions[1].Remaining != 9 {
				t.Errorf("got %+v", r)
			}
		}},
	}},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			for _, c := range confCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					key := t.Name()
					for i, sp := range c.steps {
						r, err := s.Allow(context.Background(), key, c.limits, sp.n, t0.Add(sp.at))
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						d := r.Decision()
						if r.Allowed != sp.allowed || d.Remaining != sp.remaining || d.RetryAfter != sp.retry || d.ResetAfter != sp.reset {
							t.Errorf("step %d (+%v n=%d): allowed %v remaining %d retry %v reset %v; want %v %d %v %v",
								i, sp.at, sp.n, r.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, sp.allowed, sp.remaining, sp.retry, sp.reset)
						}
						if sp.check != nil {
							sp.check(t, r)
						}
					}
				})
			}
		})
	}
}

// TestFixedWindowBoundaryBurst: 10 hits just before a minute boundary and 10 just
// after. Only the fixed window lets the second 10 through (2× the limit in 200ms).
func TestFixedWindowBoundaryBurst(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			for _, alg := range []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindowLog, bucket.SlidingWindowCounter} {
				limits := []bucket.Limit{lim(alg, 10, time.Minute, 0)}
				key := t.Name() + string(alg)
				first, err := s.Allow(context.Background(), key, limits, 10, t0.Add(59900*ms))
				if err != nil || !first.Allowed {
					t.Fatalf("%s: first 10: %+v %v", alg, first, err)
				}
				second, err := s.Allow(context.Background(), key, limits, 10, t0.Add(60100*ms))
				if err != nil {
					t.Fatal(err)
				}
				if want := alg == bucket.FixedWindow; second.Allowed != want {
					t.Errorf("%s: second 10 across the boundary allowed=%v, want %v", alg, second.Allowed, want)
				}
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			ok := lim(bucket.FixedWindow, 1, time.Second, 0)
			seoul := zone(t, "Asia/Seoul")
			bad := map[string]struct {
				limits []bucket.Limit
				n      int64
			}{
				"negative n":                     {[]bucket.Limit{ok}, -1},
				"zero rate":                      {[]bucket.Limit{{Interval: time.Second}}, 1},
				"sub-ms interval":                {[]bucket.Limit{{Rate: 1, Interval: 1500 * time.Microsecond}}, 1},
				"unknown algorithm":              {[]bucket.Limit{{Algorithm: "gcra", Rate: 1, Interval: time.Second}}, 1},
				"negative burst":                 {[]bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 1, Burst: -1, Interval: time.Second}}, 1},
				"too many limits":                {[]bucket.Limit{ok, ok, ok, ok, ok}, 1},
				"too large":                      {[]bucket.Limit{{Rate: 1 << 40, Interval: 24 * time.Hour}}, 1},
				"count over, not a fixed window": {[]bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: 1, Interval: time.Second, CountOver: true}}, 1},
				"time zone, not a fixed window":  {[]bucket.Limit{{Algorithm: bucket.SlidingWindowCounter, Rate: 1, Interval: 24 * time.Hour, Location: seoul}}, 1},
				"time zone, a week":              {[]bucket.Limit{{Rate: 1, Interval: 7 * 24 * time.Hour, Location: seoul}}, 1},
				"time zone, 7 hours":             {[]bucket.Limit{{Rate: 1, Interval: 7 * time.Hour, Location: seoul}}, 1},
			}
			for name, c := range bad {
				if _, err := s.Allow(context.Background(), t.Name(), c.limits, c.n, t0); !errors.Is(err, bucket.ErrInvalid) {
					t.Errorf("%s: err %v, want ErrInvalid", name, err)
				}
			}
			if _, err := s.Allow(context.Background(), t.Name(), []bucket.Limit{ok}, 1, time.Time{}); !errors.Is(err, bucket.ErrBadTime) {
				t.Errorf("zero time: err %v, want ErrBadTime", err)
			}
			r, err := s.Allow(context.Background(), t.Name(), nil, 1, t0)
			if err != nil || !r.Allowed || r.Index != -1 {
				t.Errorf("no limits: %+v %v", r, err)
			}
		})
	}
}

// TestStoresAgree runs one random sequence of calls through both stores and requires
// identical decisions: the Lua port must compute exactly what algorithms.go computes.
func TestStoresAgree(t *testing.T) {
	t.Parallel()
	mem, red := stores[0].new(t), stores[1].new(t)
	rng := newRand(42)
	algs := []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindowLog, bucket.SlidingWindowCounter}
	for k := 0; k < 150; k++ {
		var limits []bucket.Limit
		for j := 0; j <= int(rng.next()%4); j++ {
			limits = append(limits, bucket.Limit{
				Algorithm: algs[rng.next()%5],
				Rate:      int64(1 + rng.next()%30),
				Interval:  time.Duration(1+rng.next()%5000) * ms,
				Burst:     int64(rng.next() % 25),
				Shadow:    rng.next()%4 == 0,
			})
			if l := &limits[len(limits)-1]; l.Algorithm == bucket.FixedWindow && rng.next()%2 == 0 {
				l.CountOver = true // envoy's counting
			}
		}
		key := fmt.Sprintf("agree-%d", k)
		now := t0.Add(time.Duration(rng.next()%1e6) * ms)
		for i := 0; i < 60; i++ {
			now = now.Add(time.Duration(rng.next()%700) * ms)
			n := int64(rng.next() % 4)
			if rng.next()%10 == 0 {
				n = int64(rng.next() % 40) // sometimes more than any limit allows
			}
			a, err1 := mem.Allow(context.Background(), key, limits, n, now)
			b, err2 := red.Allow(context.Background(), key, limits, n, now)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if a != b {
				t.Fatalf("key %d call %d limits %+v n=%d:\nmemory %+v\nredis  %+v", k, i, limits, n, a, b)
			}
		}
	}
}

// xorshift: a tiny deterministic generator for tests and studies.
type xorshift struct{ s uint64 }

func newRand(seed uint64) *xorshift { return &xorshift{s: seed*0x9E3779B97F4A7C15 + 1} }

func (x *xorshift) next() uint64 {
	x.s ^= x.s << 13
	x.s ^= x.s >> 7
	x.s ^= x.s << 17
	return x.s
}

// float returns a uniform value in [0, 1).
func (x *xorshift) float() float64 { return float64(x.next()>>11) / (1 << 53) }

// TestTokenAndLeakyBucketsAgree: the two buckets are one algorithm in two
// representations (tokens left vs water level), so they decide identically.
func TestTokenAndLeakyBucketsAgree(t *testing.T) {
	t.Parallel()
	m := bucket.NewMemory(bucket.MemoryConfig{})
	rng := newRand(9)
	for k := 0; k < 50; k++ {
		rate, burst, ivl := int64(1+rng.next()%50), int64(rng.next()%80), time.Duration(1+rng.next()%10_000)*ms
		tb := []bucket.Limit{{Algorithm: bucket.TokenBucket, Rate: rate, Burst: burst, Interval: ivl}}
		lb := []bucket.Limit{{Algorithm: bucket.LeakyBucket, Rate: rate, Burst: burst, Interval: ivl}}
		now := t0
		for i := 0; i < 200; i++ {
			now = now.Add(time.Duration(rng.next()%uint64(ivl/ms/4+1)) * ms)
			n := int64(rng.next() % 6)
			a, _ := m.Allow(context.Background(), fmt.Sprint("tb", k), tb, n, now)
			b, _ := m.Allow(context.Background(), fmt.Sprint("lb", k), lb, n, now)
			if a != b {
				t.Fatalf("rate %d burst %d ivl %v call %d n=%d:\ntoken %+v\nleaky %+v", rate, burst, ivl, i, n, a, b)
			}
		}
	}
}

// zone loads an IANA time zone (from the embedded tzdata, so the test needs no
// zoneinfo on the machine).
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// zoneStep is one call at an absolute instant (RFC 3339) and what its decision must
// say, including the window length (RateLimit-Policy w=).
type zoneStep struct {
	at                   string
	n                    int64
	allowed              bool
	remaining            int64
	retry, reset, window time.Duration
}

// TestTimeZoneWindows: fixed windows with a Location turn at the zone's midnight (or
// hour), and days across a DST change last 23 or 25 hours; Retry-After and
// X-RateLimit-Reset (ResetAfter) point at the zone's boundary. Both stores.
func TestTimeZoneWindows(t *testing.T) {
	t.Parallel()
	const h = time.Hour
	cases := []struct {
		name  string
		limit bucket.Limit
		steps []zoneStep
	}{
		{"Asia/Seoul: a day turns at 15:00 UTC", bucket.Limit{Rate: 5, Interval: 24 * h, Location: zone(t, "Asia/Seoul")}, []zoneStep{
			{at: "2026-03-10T14:59:59Z", n: 5, allowed: true, remaining: 0, reset: time.Second, window: 24 * h},
			{at: "2026-03-10T14:59:59.999Z", n: 1, allowed: false, remaining: 0, retry: ms, reset: ms, window: 24 * h},
			{at: "2026-03-10T15:00:00Z", n: 1, allowed: true, remaining: 4, reset: 24 * h, window: 24 * h},
			{at: "2026-03-10T21:00:00Z", n: 5, allowed: false, remaining: 4, retry: 18 * h, reset: 18 * h, window: 24 * h},
		}},
		{"Asia/Kolkata: an hour turns at :30 UTC", bucket.Limit{Rate: 3, Interval: h, Location: zone(t, "Asia/Kolkata")}, []zoneStep{
			{at: "2026-03-10T10:29:59Z", n: 3, allowed: true, remaining: 0, reset: time.Second, window: h},
			{at: "2026-03-10T10:30:00Z", n: 1, allowed: true, remaining: 2, reset: h, window: h},
			{at: "2026-03-10T10:45:00Z", n: 3, allowed: false, remaining: 2, retry: 45 * time.Minute, reset: 45 * time.Minute, window: h},
		}},
		{"Asia/Kathmandu: an hour turns at :15 UTC", bucket.Limit{Rate: 2, Interval: h, Location: zone(t, "Asia/Kathmandu")}, []zoneStep{
			{at: "2026-03-10T10:14:00Z", n: 2, allowed: true, remaining: 0, reset: time.Minute, window: h},
			{at: "2026-03-10T10:14:30Z", n: 1, allowed: false, remaining: 0, retry: 30 * time.Second, reset: 30 * time.Second, window: h},
			{at: "2026-03-10T10:15:00Z", n: 1, allowed: true, remaining: 1, reset: h, window: h},
		}},
		{"America/New_York 2026-03-08 lasts 23 hours", bucket.Limit{Rate: 2, Interval: 24 * h, Location: zone(t, "America/New_York")}, []zoneStep{
			{at: "2026-03-07T05:00:00Z", n: 2, allowed: true, remaining: 0, reset: 24 * h, window: 24 * h}, // Saturday, EST
			{at: "2026-03-08T05:00:00Z", n: 2, allowed: true, remaining: 0, reset: 23 * h, window: 23 * h}, // midnight EST
			{at: "2026-03-08T12:00:00Z", n: 1, allowed: false, remaining: 0, retry: 16 * h, reset: 16 * h, window: 23 * h},
			{at: "2026-03-09T03:59:59.999Z", n: 1, allowed: false, remaining: 0, retry: ms, reset: ms, window: 23 * h},
			{at: "2026-03-09T04:00:00Z", n: 1, allowed: true, remaining: 1, reset: 24 * h, window: 24 * h}, // midnight EDT
		}},
		{"America/New_York 2026-11-01 lasts 25 hours", bucket.Limit{Rate: 2, Interval: 24 * h, Location: zone(t, "America/New_York")}, []zoneStep{
			{at: "2026-11-01T04:00:00Z", n: 2, allowed: true, remaining: 0, reset: 25 * h, window: 25 * h},       // midnight EDT
			{at: "2026-11-02T04:00:00Z", n: 1, allowed: false, remaining: 0, retry: h, reset: h, window: 25 * h}, // 23:00 EST: still Sunday
			{at: "2026-11-02T05:00:00Z", n: 1, allowed: true, remaining: 1, reset: 24 * h, window: 24 * h},       // midnight EST
		}},
		{"America/New_York hours: 01:00 lasts two hours on 2026-11-01", bucket.Limit{Rate: 1, Interval: h, Location: zone(t, "America/New_York")}, []zoneStep{
			{at: "2026-11-01T05:00:00Z", n: 1, allowed: true, remaining: 0, reset: 2 * h, window: 2 * h},                                      // 01:00 EDT
			{at: "2026-11-01T06:30:00Z", n: 1, allowed: false, remaining: 0, retry: 30 * time.Minute, reset: 30 * time.Minute, window: 2 * h}, // 01:30 EST
			{at: "2026-11-01T07:00:00Z", n: 1, allowed: true, remaining: 0, reset: h, window: h},                                              // 02:00 EST
		}},
		{"America/New_York hours: 02:00 does not exist on 2026-03-08", bucket.Limit{Rate: 1, Interval: h, Location: zone(t, "America/New_York")}, []zoneStep{
			{at: "2026-03-08T06:59:00Z", n: 1, allowed: true, remaining: 0, reset: time.Minute, window: h}, // 01:59 EST
			{at: "2026-03-08T07:00:00Z", n: 1, allowed: true, remaining: 0, reset: h, window: h},           // 03:00 EDT
		}},
		{"Europe/Berlin 2026-03-29 lasts 23 hours", bucket.Limit{Rate: 1, Interval: 24 * h, Location: zone(t, "Europe/Berlin")}, []zoneStep{
			{at: "2026-03-28T23:00:00Z", n: 1, allowed: true, remaining: 0, reset: 23 * h, window: 23 * h},
			{at: "2026-03-29T21:59:59Z", n: 1, allowed: false, remaining: 0, retry: time.Second, reset: time.Second, window: 23 * h},
			{at: "2026-03-29T22:00:00Z", n: 1, allowed: true, remaining: 0, reset: 24 * h, window: 24 * h},
		}},
		{"Europe/Berlin 2026-10-25 lasts 25 hours", bucket.Limit{Rate: 1, Interval: 24 * h, Location: zone(t, "Europe/Berlin")}, []zoneStep{
			{at: "2026-10-24T22:00:00Z", n: 1, allowed: true, remaining: 0, reset: 25 * h, window: 25 * h},
			{at: "2026-10-25T22:30:00Z", n: 1, allowed: false, remaining: 0, retry: 30 * time.Minute, reset: 30 * time.Minute, window: 25 * h},
			{at: "2026-10-25T23:00:00Z", n: 1, allowed: true, remaining: 0, reset: 24 * h, window: 24 * h},
		}},
		{"count over (envoy counting) in a time zone", bucket.Limit{Rate: 2, Interval: 24 * h, Location: zone(t, "Asia/Seoul"), CountOver: true}, []zoneStep{
			{at: "2026-03-10T12:00:00Z", n: 3, allowed: false, remaining: 0, retry: bucket.Never, reset: 3 * h, window: 24 * h},
			{at: "2026-03-10T13:00:00Z", n: 0, allowed: false, remaining: 0, retry: 2 * h, reset: 2 * h, window: 24 * h}, // the 3 were counted
			{at: "2026-03-10T15:00:00Z", n: 1, allowed: true, remaining: 1, reset: 24 * h, window: 24 * h},
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					key := t.Name()
					for i, sp := range c.steps {
						r, err := s.Allow(context.Background(), key, []bucket.Limit{c.limit}, sp.n, utc(t, sp.at))
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						d := r.Decision()
						if r.Allowed != sp.allowed || d.Remaining != sp.remaining || d.RetryAfter != sp.retry || d.ResetAfter != sp.reset || d.Window != sp.window {
							t.Errorf("step %d (%s n=%d): allowed %v remaining %d retry %v reset %v window %v; want %v %d %v %v %v",
								i, sp.at, sp.n, r.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Window, sp.allowed, sp.remaining, sp.retry, sp.reset, sp.window)
						}
					}
				})
			}
		})
	}
}

// TestTimeZoneLoadedTwice: a zone is known by its name. Loaded again (a rules reload
// does), it is the same limit and keeps its count; two limits of one key in the same
// zone and window still count apart.
func TestTimeZoneLoadedTwice(t *testing.T) {
	t.Parallel()
	at := utc(t, "2026-03-10T12:00:00Z")
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.new(t)
			seoul1, seoul2 := zone(t, "Asia/Seoul"), zone(t, "Asia/Seoul")
			if seoul1 == seoul2 {
				t.Skip("time.LoadLocation returned the same *Location twice; nothing to test")
			}
			key := t.Name() + "/reload"
			if r, err := s.Allow(context.Background(), key, []bucket.Limit{{Rate: 2, Interval: 24 * time.Hour, Location: seoul1}}, 2, at); err != nil || !r.Allowed {
				t.Fatalf("first: %+v %v", r, err)
			}
			r, err := s.Allow(context.Background(), key, []bucket.Limit{{Rate: 2, Interval: 24 * time.Hour, Location: seoul2}}, 1, at)
			if err != nil || r.Allowed || r.Decision().Remaining != 0 {
				t.Errorf("the zone loaded again forgot the count: %+v %v", r, err)
			}

			key = t.Name() + "/two"
			two := []bucket.Limit{{Rate: 3, Interval: 24 * time.Hour, Location: seoul1}, {Rate: 2, Interval: 24 * time.Hour, Location: seoul2}}
			if r, err := s.Allow(context.Background(), key, two, 2, at); err != nil || !r.Allowed || r.Decisions[0].Remaining != 1 || r.Decisions[1].Remaining != 0 {
				t.Fatalf("two limits, 2 hits: %+v %v", r, err)
			}
			r, err = s.Allow(context.Background(), key, two, 1, at)
			if err != nil || r.Allowed || r.Decisions[0].Remaining != 1 || r.Decisions[1].Remaining != 0 || r.Index != 1 {
				t.Errorf("two limits in one zone share a count: %+v %v", r, err)
			}
		})
	}
}

// TestTimeZoneWindowBounds: Limit.FixedWindow, the window every store and the ingress
// (X-RateLimit-Reset, gRPC duration_until_reset) use, in zones whose clocks jump.
func TestTimeZoneWindowBounds(t *testing.T) {
	t.Parallel()
	const h = time.Hour
	cases := []struct {
		zone       string
		ivl        time.Duration
		at         string
		start, end string // local wall clock, RFC 3339 with the offset in force
	}{
		{"Asia/Seoul", 24 * h, "2026-03-10T15:00:00Z", "2026-03-11T00:00:00+09:00", "2026-03-12T00:00:00+09:00"},
		{"America/New_York", 24 * h, "2026-03-08T12:00:00Z", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"},
		{"America/New_York", 24 * h, "2026-11-01T12:00:00Z", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00"},
		{"America/New_York", h, "2026-11-01T06:30:00Z", "2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00"},
		{"America/New_York", h, "2026-03-08T06:30:00Z", "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"},
		{"America/New_York", 6 * h, "2026-03-08T06:30:00Z", "2026-03-08T00:00:00-05:00", "2026-03-08T06:00:00-04:00"},
		{"Europe/Berlin", 24 * h, "2026-03-29T12:00:00Z", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"},
		{"Europe/Berlin", 24 * h, "2026-10-25T12:00:00Z", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"},
		// Cuba springs forward at midnight: that day starts at 01:00.
		{"America/Havana", 24 * h, "2026-03-08T12:00:00Z", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00"},
		// Chile falls back at 24:00: the wall clock never shows Sunday's 00:00 -03, so
		// Saturday lasts 25 hours.
		{"America/Santiago", 24 * h, "2026-04-05T03:30:00Z", "2026-04-04T00:00:00-03:00", "2026-04-05T00:00:00-04:00"},
		// Lord Howe Island moves its clock by 30 minutes.
		{"Australia/Lord_Howe", h, "2026-04-04T15:10:00Z", "2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"},
		{"Asia/Kathmandu", h, "2026-04-04T15:10:00Z", "2026-04-04T20:00:00+05:45", "2026-04-04T21:00:00+05:45"},
		{"Asia/Kolkata", 15 * time.Minute, "2026-04-04T15:10:00Z", "2026-04-04T20:30:00+05:30", "2026-04-04T20:45:00+05:30"},
	}
	for _, c := range cases {
		l := bucket.Limit{Rate: 1, Interval: c.ivl, Location: zone(t, c.zone)}
		s, e := l.FixedWindow(utc(t, c.at))
		if !s.Equal(utc(t, c.start)) || !e.Equal(utc(t, c.end)) {
			t.Errorf("%s %v at %s: window [%s, %s), want [%s, %s)", c.zone, c.ivl, c.at,
				s.In(l.Location).Format(time.RFC3339), e.In(l.Location).Format(time.RFC3339), c.start, c.end)
		}
	}
	// Without a Location (or in UTC), windows are aligned to the epoch.
	for _, loc := range []*time.Location{nil, time.UTC} {
		s, e := bucket.Limit{Rate: 1, Interval: 24 * h, Location: loc}.FixedWindow(utc(t, "2026-03-10T15:00:00Z"))
		if !s.Equal(utc(t, "2026-03-10T00:00:00Z")) || !e.Equal(utc(t, "2026-03-11T00:00:00Z")) {
			t.Errorf("%v: [%v, %v)", loc, s, e)
		}
	}
}

// TestTimeZoneStoresAgree: random calls on zoned windows across the DST changes of
// three zones; the memory store and the Lua script must decide identically.
func TestTimeZoneStoresAgree(t *testing.T) {
	t.Parallel()
	mem, red := stores[0].new(t), stores[1].new(t)
	rng := newRand(7)
	zones := []string{"America/New_York", "Europe/Berlin", "Asia/Kathmandu", "Australia/Lord_Howe"}
	starts := []string{"2026-03-07T20:00:00Z", "2026-10-31T20:00:00Z", "2026-03-28T20:00:00Z", "2026-04-04T10:00:00Z"}
	ivls := []time.Duration{15 * time.Minute, time.Hour, 3 * time.Hour, 24 * time.Hour}
	for k := 0; k < 60; k++ {
		loc := zone(t, zones[rng.next()%uint64(len(zones))])
		limits := []bucket.Limit{{Rate: int64(1 + rng.next()%6), Interval: ivls[rng.next()%uint64(len(ivls))], Location: loc, CountOver: rng.next()%3 == 0}}
		if rng.next()%2 == 0 {
			limits = append(limits, lim(bucket.TokenBucket, int64(1+rng.next()%10), time.Hour, 0))
		}
		key := fmt.Sprintf("zagree-%d", k)
		now := utc(t, starts[rng.next()%uint64(len(starts))])
		for i := 0; i < 80; i++ {
			now = now.Add(time.Duration(rng.next()%(40*60)) * time.Second)
			n := int64(rng.next() % 3)
			a, err1 := mem.Allow(context.Background(), key, limits, n, now)
			b, err2 := red.Allow(context.Background(), key, limits, n, now)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if a != b {
				t.Fatalf("key %d call %d (%s) limits %+v n=%d:\nmemory %+v\nredis  %+v", k, i, now.Format(time.RFC3339), limits, n, a, b)
			}
		}
	}
}

// TestTimeZoneWindowsTile: minute by minute over three days around each DST change of
// four zones (and Cuba's and Chile's changes at midnight), the windows Limit.FixedWindow
// gives hold the instant, follow one another without gap or overlap, never come back,
// and last their length give or take the change; and a store admits at most Rate hits
// in each of them.
func TestTimeZoneWindowsTile(t *testing.T) {
	t.Parallel()
	m := bucket.NewMemory(bucket.MemoryConfig{})
	spans := []struct{ zone, from string }{
		{"America/New_York", "2026-03-07T00:00:00Z"}, {"America/New_York", "2026-10-31T00:00:00Z"},
		{"Europe/Berlin", "2026-03-28T00:00:00Z"}, {"Europe/Berlin", "2026-10-24T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-03T12:00:00Z"}, {"Australia/Lord_Howe", "2026-10-02T12:00:00Z"},
		{"America/Havana", "2026-03-07T00:00:00Z"}, {"America/Havana", "2026-10-31T00:00:00Z"},
		{"America/Santiago", "2026-04-03T12:00:00Z"}, {"America/Santiago", "2026-09-05T12:00:00Z"},
		{"Asia/Kathmandu", "2026-03-07T00:00:00Z"},
	}
	for _, sp := range spans {
		for _, ivl := range []time.Duration{15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour} {
			l := bucket.Limit{Rate: 3, Interval: ivl, Location: zone(t, sp.zone)}
			key := fmt.Sprint(sp.zone, sp.from, ivl)
			var prevStart, prevEnd time.Time
			admitted := map[time.Time]int64{}
			from := utc(t, sp.from)
			for at := from; at.Before(from.Add(72 * time.Hour)); at = at.Add(time.Minute) {
				s, e := l.FixedWindow(at)
				switch {
				case at.Before(s) || !at.Before(e):
					t.Fatalf("%s %v at %s: window [%s, %s) does not hold it", sp.zone, ivl, at, s, e)
				case e.Sub(s) < ivl-time.Hour || e.Sub(s) > ivl+time.Hour:
					t.Fatalf("%s %v at %s: window [%s, %s) lasts %v", sp.zone, ivl, at, s, e, e.Sub(s))
				case !prevStart.IsZero() && s != prevStart && !s.Equal(prevEnd):
					t.Fatalf("%s %v at %s: window [%s, %s) does not follow [%s, %s)", sp.zone, ivl, at, s, e, prevStart, prevEnd)
				case !prevStart.IsZero() && s == prevStart && !e.Equal(prevEnd):
					t.Fatalf("%s %v at %s: window from %s ends at %s, before at %s", sp.zone, ivl, at, s, e, prevEnd)
				}
				prevStart, prevEnd = s, e
				r, err := m.Allow(context.Background(), key, []bucket.Limit{l}, 2, at)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					admitted[s] += 2
				}
				if d := r.Decision(); !r.Allowed && !at.Add(d.RetryAfter).Equal(e) {
					t.Fatalf("%s %v at %s: retry after %v, not at the window's end %s", sp.zone, ivl, at, d.RetryAfter, e)
				}
			}
			for s, n := range admitted {
				if n > l.Rate {
					t.Errorf("%s %v: %d hits in the window from %s", sp.zone, ivl, n, s)
				}
			}
		}
	}
}
