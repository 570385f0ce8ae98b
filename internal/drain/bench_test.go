package drain_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// Reports are measurements, not tests: they run only with SLUICE_BENCH=1 (make bench) and
// print their figures with t.Logf. Bars (docs/design.md): outflow within ±1% of the configured
// rate, p99 dispatch lag ≤ 10 ms, 2 drainers ≥ 0.8× a bare GetMsg+DeleteMsg loop.
func benchOnly(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to run reports")
	}
}

// fill publishes n messages for each key with conc publishers and marks each key due at
// start + its index × spread (so many keys do not all fall due in the same instant).
func (e *env) fill(r *rules.Rule, keys []string, n int, start time.Time, spread time.Duration) {
	e.t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	work := make(chan string)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				for i := 0; i < n; i++ {
					m := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Key: k, Payload: []byte(`{}`), CreatedAt: time.Now()}
					if _, err := e.q.Enqueue(ctx, r.Name, m); err != nil {
						e.t.Error(err)
						return
					}
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	for i, k := range keys {
		if _, err := e.s.Claims.MarkDueAt(ctx, r.Name, start.Add(time.Duration(i)*spread), k); err != nil {
			e.t.Fatal(err)
		}
	}
}

// stampSink records the time of every delivery per key and answers at once.
type stampSink struct {
	mu sync.Mutex
	at map[string][]time.Time
	n  atomic.Int64
}

func (s *stampSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	now := time.Now()
	s.mu.Lock()
	if s.at == nil {
		s.at = map[string][]time.Time{}
	}
	s.at[m.Key] = append(s.at[m.Key], now)
	s.mu.Unlock()
	s.n.Add(1)
	return drain.OutcomeDelivered()
}

// histQuantile estimates a quantile of the rule's lag histogram like PromQL's
// histogram_quantile (linear inside the bucket).
func histQuantile(t *testing.T, reg *prometheus.Registry, q float64) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_dispatch_lag_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		rank := q * float64(h.GetSampleCount())
		lo, prev := 0.0, 0.0
		for _, b := range h.GetBucket() {
			c := float64(b.GetCumulativeCount())
			if c >= rank {
				return lo + (b.GetUpperBound()-lo)*(rank-prev)/math.Max(c-prev, 1)
			}
			lo, prev = b.GetUpperBound(), c
		}
		return math.Inf(1)
	}
	return math.NaN()
}

// gridLag returns, for deliveries of one key at a fixed spacing, how late each was against
// the ideal grid anchored at its first delivery: it includes pop time and any drift.
func gridLag(ts []time.Time, every time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(ts))
	for i, t := range ts {
		out = append(out, t.Sub(ts[0].Add(time.Duration(i)*every)))
	}
	return out
}

func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func TestOutflowAccuracyReport(t *testing.T) {
	benchOnly(t)
	dur := 30 * time.Second
	if v := os.Getenv("SLUICE_BENCH_SECONDS"); v != "" {
		var s int
		fmt.Sscan(v, &s)
		dur = time.Duration(s) * time.Second
	}
	cases := []struct {
		name    string
		keys    int
		perSec  int64
		workers int
	}{
		{"1 key at 100/s", 1, 100, 8},
		{"1000 keys at 1/s", 1000, 1, 64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			every := time.Second / time.Duration(tc.perSec)
			perKey := int(dur/every) + 5 // never runs dry within the window
			r := e.rule("accuracy", tc.perSec, 0, func(r *rules.Rule) { r.Queue.Capacity = int64(perKey) })
			keys := make([]string, tc.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%04d", i)
			}
			start := time.Now().Add(2 * time.Second)
			e.fill(r, keys, perKey, start, every/time.Duration(tc.keys))
			if d := time.Until(start); d < 500*time.Millisecond {
				t.Logf("filling took long; first slots are %s late", -d)
			}
			sink := &stampSink{}
			reg := prometheus.NewRegistry()
			e.drainer(context.Background(), sink, func(c *drain.Config) { c.Workers = tc.workers; c.Registerer = reg })
			time.Sleep(time.Until(start) + dur) // the scenario: the load runs for dur
			sink.mu.Lock()
			defer sink.mu.Unlock()
			var lags []time.Duration
			var rates []float64
			total, most := 0, 0
			for _, ts := range sink.at {
				most = max(most, maxInWindow(ts, time.Second)) // every attempt, the whole run
				// Count only the window [start, start+dur): the configured schedule.
				var in []time.Time
				for _, x := range ts {
					if x.Before(start.Add(dur)) {
						in = append(in, x)
					}
				}
				total += len(in)
				if len(in) > 1 {
					rates = append(rates, float64(len(in)-1)/in[len(in)-1].Sub(in[0]).Seconds())
				}
				lags = append(lags, gridLag(in, every)...)
			}
			var mean float64
			for _, x := range rates {
				mean += x
			}
			mean /= float64(len(rates))
			want := float64(tc.perSec)
			t.Logf("%s over %s: per-key rate %.3f/s (configured %d/s, %+.2f%%), most of one key in any 1 s %d; rule %d deliveries = %.1f/s (ideal %d/s)",
				tc.name, dur, mean, tc.perSec, 100*(mean-want)/want, most, total, float64(total)/dur.Seconds(), int64(tc.keys)*tc.perSec)
			t.Logf("BENCH %s-most-per-key-in-1s %d", tc.name, most)
			t.Logf("%s: dispatch lag (metric, due→dispatch) p50 %.2f ms p99 %.2f ms; sink-side lag vs ideal grid p50 %s p99 %s max %s",
				tc.name, 1000*histQuantile(t, reg, 0.5), 1000*histQuantile(t, reg, 0.99), pct(lags, 0.5), pct(lags, 0.99), pct(lags, 1))
		})
	}
}

// bareLoop pops and deletes every message of keys with conc goroutines (each owning a
// share of the keys), the upper bound of the JetStream side of a drain.
func bareLoop(t *testing.T, q *queue.Queues, rule string, keys []string, conc int) (int, time.Duration) {
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += conc {
				for {
					p, err := q.Pop(ctx, rule, keys[i])
					if errors.Is(err, queue.ErrEmpty) {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
					if err := q.Delete(ctx, rule, p.Seq); err != nil {
						t.Error(err)
						return
					}
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(n.Load()), time.Since(begin)
}

func TestDrainThroughputReport(t *testing.T) {
	benchOnly(t)
	const nKeys, perKey, workers, rounds = 400, 25, 32, 3
	e := newEnv(t)
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	// An outflow far above what one node can pop: the figure is the drain path's cost.
	r := e.rule("throughput", 1_000_000, 0, nil)

	drainRun := func(drainers int) float64 {
		e.fill(r, keys, perKey, time.Now(), 0)
		sink := &stampSink{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var ds []*drain.Drainer
		begin := time.Now()
		for i := 0; i < drainers; i++ {
			ds = append(ds, e.drainer(ctx, sink, func(c *drain.Config) { c.Workers = workers }))
		}
		waittest.Eventually(t, 5*time.Minute, "drain", func() bool { return sink.n.Load() >= nKeys*perKey })
		el := time.Since(begin)
		for _, d := range ds {
			d.Stop()
		}
		return float64(sink.n.Load()) / el.Seconds()
	}
	bareRun := func(conc int) float64 {
		e.fill(r, keys, perKey, time.Now(), 0)
		n, d := bareLoop(t, e.q, r.Name, keys, conc)
		return float64(n) / d.Seconds()
	}
	// The machine is shared: interleave the runs and compare medians, so a burst of load
	// from elsewhere does not land on one side only.
	var bare1, bareW, bare2W, d1, d2 []float64
	for i := 0; i < rounds; i++ {
		bare1 = append(bare1, bareRun(1))
		bareW = append(bareW, bareRun(workers))
		bare2W = append(bare2W, bareRun(2*workers))
		d1 = append(d1, drainRun(1))
		d2 = append(d2, drainRun(2))
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	bare := max(med(bareW), med(bare2W))
	t.Logf("bare GetMsg+DeleteMsg loop (median of %d): %.0f msg/s with 1 goroutine, %.0f with %d, %.0f with %d",
		rounds, med(bare1), med(bareW), workers, med(bare2W), 2*workers)
	t.Logf("1 drainer × %d workers: %.0f msg/s = %.2f× the best bare loop (%.2f× the bare loop at the same concurrency)",
		workers, med(d1), med(d1)/bare, med(d1)/med(bareW))
	t.Logf("2 drainers × %d workers: %.0f msg/s = %.2f× the best bare loop (%.2f× the bare loop at the same concurrency)",
		workers, med(d2), med(d2)/bare, med(d2)/med(bare2W))
}

// TestEngineDrainReport (make bench, SLUICE_BENCH=1): deliveries/s of a backlog to an HTTP
// sink answering 200 — the own engine, the claim engine, and the same work by hand (direct
// get + the same POST through the same sink + delete, one goroutine per worker, each owning
// a share of the keys) — in alternating rounds of one run, reported as medians and ratios.
// SLUICE_BENCH_KEYS (default 1000) and SLUICE_BENCH_PER_KEY (default 20) size the backlog.
func TestEngineDrainReport(t *testing.T) {
	benchOnly(t)
	nKeys, perKey, rounds, workers := envInt("SLUICE_BENCH_KEYS", 1000), envInt("SLUICE_BENCH_PER_KEY", 20), envInt("SLUICE_BENCH_ROUNDS", 3), 64
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	hs, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	keys := keyNames(nKeys)
	r := e.rule("engines", 1_000_000, 0, func(r *rules.Rule) {
		r.Sink.URL = srv.URL
		r.Sink.Timeout = 10 * time.Second
		r.Queue.Capacity = int64(perKey + 10)
	})
	total := int64(nKeys * perKey)
	fill := func() {
		e.publish(r, keys, perKey)
		if _, err := e.s.Claims.MarkDueAt(context.Background(), r.Name, time.Time{}, keys...); err != nil {
			t.Fatal(err)
		}
	}
	var startup []time.Duration
	drainRun := func(engine string, drainers int) float64 {
		fill()
		sk := &countingSink{inner: hs}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		begin := time.Now()
		var ds []*drain.Drainer
		for range drainers {
			ds = append(ds, e.drainer(ctx, sk, func(c *drain.Config) { c.Engine = engine; c.Workers = workers }))
		}
		waittest.Eventually(t, 10*time.Minute, "drain", func() bool { return sk.n.Load() >= total })
		end := time.Now()
		for _, d := range ds {
			d.Stop()
		}
		// From the first delivery: a drainer's start (the own engine announces itself, then
		// owns partitions half a second later) is not its throughput. startup says how long.
		first := time.Unix(0, sk.first.Load())
		startup = append(startup, first.Sub(begin))
		return float64(sk.n.Load()-1) / end.Sub(first).Seconds()
	}
	handRun := func() float64 {
		fill()
		ctx := context.Background()
		var n atomic.Int64
		var wg sync.WaitGroup
		begin := time.Now()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(keys); i += workers {
					for {
						p, err := e.q.Pop(ctx, r.Name, keys[i])
						if errors.Is(err, queue.ErrEmpty) {
							break
						}
						if err != nil {
							t.Error(err)
							return
						}
						if out := hs.Deliver(ctx, r, p.Message); out.Verdict != drain.Delivered {
							t.Errorf("by hand: %+v", out)
							return
						}
						if err := e.q.Delete(ctx, r.Name, p.Seq); err != nil {
							t.Error(err)
							return
						}
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()) / time.Since(begin).Seconds()
	}
	// SLUICE_BENCH_SYSTEMS picks what runs (default all: hand,claim,own,own2).
	systems := os.Getenv("SLUICE_BENCH_SYSTEMS")
	if systems == "" {
		systems = "hand,claim,own,own2"
	}
	on := func(name string) bool { return slices.Contains(strings.Split(systems, ","), name) }
	var hand, claim, own, own2 []float64
	for i := 0; i < rounds; i++ {
		if on("hand") {
			hand = append(hand, handRun())
		}
		if on("claim") {
			claim = append(claim, drainRun(drain.EngineClaim, 1))
		}
		if on("own") {
			own = append(own, drainRun(drain.EngineOwn, 1))
		}
		if on("own2") {
			own2 = append(own2, drainRun(drain.EngineOwn, 2))
		}
	}
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return math.NaN()
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	rng := func(xs []float64) string {
		if len(xs) == 0 {
			return "not run"
		}
		return fmt.Sprintf("%.0f–%.0f", slices.Min(xs), slices.Max(xs))
	}
	t.Logf("backlog %d messages over %d keys, HTTP sink answering 200, %d workers, %d alternating rounds (shared, loaded machine)", total, nKeys, workers, rounds)
	t.Logf("by hand (direct get + POST + delete): median %.0f/s (%s)", med(hand), rng(hand))
	t.Logf("claim engine, 1 drainer:              median %.0f/s (%s) = %.2f× by hand", med(claim), rng(claim), med(claim)/med(hand))
	t.Logf("own engine, 1 drainer:                median %.0f/s (%s) = %.2f× by hand, %.2f× claim", med(own), rng(own), med(own)/med(hand), med(own)/med(claim))
	t.Logf("own engine, 2 drainers:               median %.0f/s (%s) = %.2f× one own drainer", med(own2), rng(own2), med(own2)/med(own))
	t.Logf("time from start to first delivery (all drainer runs): max %v", slices.Max(startup).Round(time.Millisecond))
	t.Logf("BENCH own/hand %.2f claim/hand %.2f own/claim %.2f own2/own1 %.2f", med(own)/med(hand), med(claim)/med(hand), med(own)/med(claim), med(own2)/med(own))
}

// countingSink counts deliveries the inner sink accepted, and notes when the first began.
type countingSink struct {
	inner drain.Sink
	n     atomic.Int64
	first atomic.Int64 // unix ns
}

func (s *countingSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	s.first.CompareAndSwap(0, time.Now().UnixNano())
	out := s.inner.Deliver(ctx, r, m)
	if out.Verdict == drain.Delivered {
		s.n.Add(1)
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
