package integration_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// The soak: 10k keys at 70% of the measured maximum admission rate for
// SLUICE_SOAK_DURATION (default 10m), with a progress line every 5 s and a summary table;
// memory, goroutines and Redis keys must stay flat, the outflow must hold and nothing
// acknowledged may be lost. Runs only with SLUICE_SOAK=1 (make soak).

const soakRules = `
domain: soak
descriptors:
  - key: user_id
    name: soak
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 2}}
    delivery: {max_attempts: 100, min_backoff: 100ms, max_backoff: 1s}
    sink: {url: "COUNTING_SINK/soak", timeout: 5s}
`

// countingSink is a sink for millions of deliveries: it keeps counters, a bitset of the
// sequence numbers delivered and, per key, the last arrival, instead of every delivery.
type countingSink struct {
	URL      string
	interval time.Duration // the per-key outflow interval checked

	mu         sync.Mutex
	delivered  bitset
	lastAt     map[string][]time.Time // per key, the last windowMax arrivals (oldest first)
	count      int64
	duplicates int64
	tooClose   int64         // single per-key gaps under interval - arrivalJitter
	closest    time.Duration // smallest per-key gap seen
	// overRate counts the times a key got more than windowMax deliveries within window:
	// the outflow allows window/interval + 1, plus one for arrival jitter. (Single gaps
	// are only reported: under saturation a delivery that leaves late shortens the gap
	// after it, without any excess over the outflow.)
	overRate  int64
	window    time.Duration
	windowMax int
}

type bitset []uint64

func (b *bitset) set(i int) bool {
	w := i / 64
	for len(*b) <= w {
		*b = append(*b, 0)
	}
	was := (*b)[w]&(1<<(i%64)) != 0
	(*b)[w] |= 1 << (i % 64)
	return was
}

func (b bitset) has(i int) bool {
	w := i / 64
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

func startCountingSink(t testing.TB, interval time.Duration) *countingSink {
	s := &countingSink{interval: interval, lastAt: map[string][]time.Time{}, closest: time.Hour,
		window: 10 * interval, windowMax: 12}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		key := r.Header.Get("Sluice-Key")
		// payload: {"s":123}
		seq, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(string(body), `{"s":`), "}"))
		s.mu.Lock()
		s.count++
		if err == nil && s.delivered.set(seq) {
			s.duplicates++
		}
		last := s.lastAt[key]
		if n := len(last); n > 0 {
			g := now.Sub(last[n-1])
			if g < s.closest {
				s.closest = g
			}
			if g < s.interval-arrivalJitter {
				s.tooClose++
			}
		}
		// With this one, windowMax+1 deliveries within window?
		if len(last) == s.windowMax && now.Sub(last[0]) < s.window {
			s.overRate++
		}
		last = append(last, now)
		if len(last) > s.windowMax {
			last = last[1:]
		}
		s.lastAt[key] = last
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

func (s *countingSink) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// hotKeys get 5% of the soak's traffic, far above their outflow, so some queues are
// always full and drain exactly at the outflow.
const hotKeys = 10

// soakLoad submits to both ingresses, keys chosen at random among nkeys, each message
// numbered (the payload) so the sink's bitset can tell what arrived.
type soakLoad struct {
	c     *cluster
	nkeys int
	seq   atomic.Int64

	mu      sync.Mutex
	acked   bitset
	nacked  int64
	lat     []time.Duration // since the last take
	errors  map[string]int64
	ok, bad atomic.Int64
	dropped atomic.Int64 // open-loop sends skipped because every worker was busy
}

func (l *soakLoad) one(ctx context.Context, i int) {
	seq := int(l.seq.Add(1))
	k := rand.IntN(l.nkeys)
	if rand.IntN(20) == 0 {
		k = rand.IntN(hotKeys) // 5% of the traffic on a few keys, above their outflow: full queues, 429s
	}
	key := fmt.Sprintf("u-%05d", k)
	start := time.Now()
	r := l.c.do(ctx, "POST", l.c.ingress[i%len(l.c.ingress)].URL()+"/v1/messages",
		submitBody("soak", []kv{{"user_id", key}}, fmt.Sprintf(`{"s":%d}`, seq)), nil)
	d := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lat = append(l.lat, d)
	if r.Code == 202 {
		l.acked.set(seq)
		l.nacked++
		l.ok.Add(1)
		return
	}
	l.bad.Add(1)
	if ctx.Err() != nil {
		return
	}
	if l.errors == nil {
		l.errors = map[string]int64{}
	}
	what := fmt.Sprint(r.Code)
	if r.Err != nil {
		what = "no answer"
	}
	l.errors[what]++
}

// takeLatencies returns and resets the latencies recorded since the last call.
func (l *soakLoad) takeLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lat
	l.lat = nil
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// closedLoop runs workers that each submit back to back until ctx ends.
func (l *soakLoad) closedLoop(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l.one(ctx, w)
			}
		}()
	}
	wg.Wait()
}

// openLoop submits at rate per second until ctx ends, with up to workers requests in
// flight; a send that finds every worker busy is dropped and counted.
func (l *soakLoad) openLoop(ctx context.Context, rate float64, workers int) {
	work := make(chan int, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				l.one(ctx, i)
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	sent := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		due := int(rate * time.Since(start).Seconds())
		for ; sent < due; sent++ {
			select {
			case work <- sent:
			default:
				l.dropped.Add(1)
			}
		}
	}
	close(work)
	wg.Wait()
}

// procSample is one scrape of a child process.
type procSample struct {
	rssMB      float64
	goroutines float64
}

func scrapeProc(p *proctest.Proc) (procSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := p.Metrics(ctx)
	if err != nil {
		return procSample{}, err
	}
	return procSample{rssMB: m.Get("process_resident_memory_bytes") / (1 << 20), goroutines: m.Get("go_goroutines")}, nil
}

// redisKeys returns DBSIZE and the number of keys without a TTL (INFO keyspace: keys −
// expires). Status records and idempotency keys carry a 25 h / 24 h TTL by design, so
// DBSIZE grows with the admission rate × TTL; the keys without a TTL (queues' due sets,
// counters) must stay flat.
func redisKeys(rdb *redis.Client) (total, persistent int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "keyspace").Result()
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "db0:") {
			continue
		}
		var keys, expires int64
		for _, f := range strings.Split(strings.TrimPrefix(line, "db0:"), ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "keys":
				keys = n
			case "expires":
				expires = n
			}
		}
		return keys, keys - expires
	}
	return 0, 0
}

func soakDuration(t *testing.T) time.Duration {
	d := 10 * time.Minute
	if v := os.Getenv("SLUICE_SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SLUICE_SOAK_DURATION: %v", err)
		}
	}
	return d
}

func TestSoakLoad(t *testing.T) {
	if os.Getenv("SLUICE_SOAK") == "" {
		t.Skip("10-minute load at 70% of the measured maximum: SLUICE_SOAK=1 (make soak); SLUICE_SOAK_DURATION sets the length")
	}
	duration := soakDuration(t)
	const nkeys = 10000
	sink := startCountingSink(t, 500*time.Millisecond) // outflow 2/s per key
	c := startCluster(t, clusterOptions{rules: strings.ReplaceAll(soakRules, "COUNTING_SINK", sink.URL), drainerWorkers: 64})
	rdb := redis.NewClient(c.redis.Options())
	t.Cleanup(func() { rdb.Close() })
	l := &soakLoad{c: c, nkeys: nkeys}

	// 1. The maximum: closed loop, 64 requests in flight over both ingresses, 10 s.
	maxCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	start := time.Now()
	l.closedLoop(maxCtx, 64)
	cancel()
	maxRate := float64(l.ok.Load()) / time.Since(start).Seconds()
	maxLat := l.takeLatencies()
	t.Logf("max admission: %.0f req/s (p50 %v, p99 %v) over 2 ingresses with 64 in flight; errors %v",
		maxRate, pct(maxLat, 0.5).Round(time.Microsecond), pct(maxLat, 0.99).Round(time.Microsecond), l.errors)
	if maxRate < 10 {
		t.Fatalf("max admission %.0f req/s: the system does not admit", maxRate)
	}
	// Let the burst drain before the soak, so the soak starts from a steady state.
	acked := l.nacked
	if !waittest.Within(5*time.Minute, func() bool { return sink.total() >= acked }) {
		t.Logf("the 10 s burst did not drain in 5 min (%d of %d delivered): drain is slower than admission", sink.total(), acked)
	}

	// 2. The soak at 70%.
	rate := 0.7 * maxRate
	procs := append(append([]*proctest.Proc{}, c.ingress...), c.drainers...)
	type sample struct {
		at        time.Duration
		procs     []procSample
		redis     int64
		redisPers int64
	}
	var samples []sample
	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	done := make(chan struct{})
	go func() { l.openLoop(ctx, rate, 256); close(done) }()
	t.Logf("soak: %.0f req/s (70%% of max) over %d keys for %v", rate, nkeys, duration)
	t.Logf("%8s %8s %9s %10s %s %12s", "t", "req/s", "p99", "deliv/s", "RSS MB / goroutines: "+names(procs), "redis keys (no TTL)")
	soakStart := time.Now()
	lastOK, lastDel := l.ok.Load(), sink.total()
	lastAt := soakStart
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	running := true
	for running {
		select {
		case <-done:
			running = false
		case <-tick.C:
		}
		now := time.Now()
		ok, del := l.ok.Load(), sink.total()
		el := now.Sub(lastAt).Seconds()
		lats := l.takeLatencies()
		s := sample{at: now.Sub(soakStart)}
		var cols []string
		for _, p := range procs {
			ps, err := scrapeProc(p)
			if err != nil {
				t.Errorf("%s /metrics: %v", p.Name(), err)
			}
			s.procs = append(s.procs, ps)
			cols = append(cols, fmt.Sprintf("%.0f/%.0f", ps.rssMB, ps.goroutines))
		}
		s.redis, s.redisPers = redisKeys(rdb)
		samples = append(samples, s)
		t.Logf("%8v %8.0f %9v %10.0f %s %12s", s.at.Round(time.Second), float64(ok-lastOK)/el, pct(lats, 0.99).Round(time.Microsecond),
			float64(del-lastDel)/el, strings.Join(cols, " "), fmt.Sprintf("%d (%d)", s.redis, s.redisPers))
		lastOK, lastDel, lastAt = ok, del, now
	}
	soakTook := time.Since(soakStart)

	// 3. Drain, then the verdict.
	lostNow := func() int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		lost := 0
		for i := range len(l.acked) * 64 {
			if l.acked.has(i) && !sink.delivered.has(i) {
				lost++
			}
		}
		return lost
	}
	waittest.Within(5*time.Minute, func() bool { return lostNow() == 0 })
	lost := lostNow()
	sink.mu.Lock()
	dups, tooClose, overRate, closest, delivered := sink.duplicates, sink.tooClose, sink.overRate, sink.closest, sink.count
	sink.mu.Unlock()

	// Summary table.
	var b strings.Builder
	fmt.Fprintf(&b, "\n| soak %v at %.0f req/s, %d keys | value |\n|---|---:|\n", soakTook.Round(time.Second), rate, nkeys)
	fmt.Fprintf(&b, "| max admission measured (10 s, 64 in flight) | %.0f req/s |\n", maxRate)
	fmt.Fprintf(&b, "| acknowledged (202), whole run | %d |\n| delivered | %d |\n| lost | %d |\n| duplicated | %d |\n", l.nacked, delivered, lost, dups)
	fmt.Fprintf(&b, "| sends dropped (every worker busy) | %d |\n| other answers | %v |\n", l.dropped.Load(), l.errors)
	fmt.Fprintf(&b, "| per-key outflow 2/s: more than 12 deliveries of a key within 5 s | %d |\n", overRate)
	fmt.Fprintf(&b, "| hot keys (5%% of traffic): delivered at | %s |\n", hotRate(sink, soakTook))
	fmt.Fprintf(&b, "| per-key single gaps under 500 ms − jitter (a late delivery shortens the next gap) | %d of %d (closest %v) |\n", tooClose, delivered, closest.Round(time.Millisecond))
	first, last := samples[min(len(samples)-1, len(samples)/4)], samples[len(samples)-1]
	for i, p := range procs {
		maxRSS, maxG := 0.0, 0.0
		for _, s := range samples {
			maxRSS, maxG = max(maxRSS, s.procs[i].rssMB), max(maxG, s.procs[i].goroutines)
		}
		fmt.Fprintf(&b, "| %s RSS MB at 25%% / end / max | %.0f / %.0f / %.0f |\n", p.Name(), first.procs[i].rssMB, last.procs[i].rssMB, maxRSS)
		fmt.Fprintf(&b, "| %s goroutines at 25%% / end / max | %.0f / %.0f / %.0f |\n", p.Name(), first.procs[i].goroutines, last.procs[i].goroutines, maxG)
		if last.procs[i].rssMB > 1.5*first.procs[i].rssMB+64 {
			t.Errorf("%s: RSS grew from %.0f MB to %.0f MB", p.Name(), first.procs[i].rssMB, last.procs[i].rssMB)
		}
		if last.procs[i].goroutines > 1.5*first.procs[i].goroutines+50 {
			t.Errorf("%s: goroutines grew from %.0f to %.0f", p.Name(), first.procs[i].goroutines, last.procs[i].goroutines)
		}
	}
	fmt.Fprintf(&b, "| Redis keys at 25%% / end (status records, 25 h TTL by design) | %d / %d |\n", first.redis, last.redis)
	fmt.Fprintf(&b, "| Redis keys without TTL at 25%% / end | %d / %d |\n", first.redisPers, last.redisPers)
	t.Log(b.String())
	if err := os.MkdirAll("results", 0o755); err == nil {
		os.WriteFile("results/soak.md", []byte("# sluice soak (TestSoakLoad)\n\nMachine: "+machine()+".\n"+b.String()), 0o644)
	}
	if last.redisPers > first.redisPers*3/2+2*nkeys {
		t.Errorf("Redis keys without a TTL grew from %d to %d", first.redisPers, last.redisPers)
	}
	if lost > 0 {
		t.Errorf("%d acknowledged messages never delivered", lost)
	}
	if overRate > 0 {
		t.Errorf("%d times a key got more than 12 deliveries within 5 s at 2/s", overRate)
	}
}

// hotRate is what the hot keys' deliveries say about their rate: each had a full queue,
// so it drained at its outflow (2/s) the whole time.
func hotRate(s *countingSink, _ time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := 0; k < min(hotKeys, 3); k++ {
		last := s.lastAt[fmt.Sprintf("u-%05d", k)]
		if len(last) > 1 {
			span := last[len(last)-1].Sub(last[0])
			out = append(out, fmt.Sprintf("%.2f/s", float64(len(last)-1)/span.Seconds()))
		}
	}
	return strings.Join(out, ", ") + " (last 12 deliveries of 3 of them)"
}

func names(ps []*proctest.Proc) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name())
	}
	return strings.Join(n, " ")
}
