package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// TestE2EReport measures the whole system through its processes and compares each figure
// with its bare ceiling measured in the same run on the same cluster: admission through
// 2 ingress processes vs a bare HTTP publish handler in 2 processes and vs publishing
// straight to an R3 stream, in alternating rounds; draining through 2 drainer
// processes vs the same work by hand (get + POST + delete + delivered record); outflow error. SLUICE_BENCH=1 only; the result is
// written to results/bench.md.

const reportRules = `
domain: bench
descriptors:
  - key: user_id
    name: bench
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1000}}
    sink: {url: "COUNTING_SINK/bench", timeout: 5s}
  - key: paced_id
    name: paced
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 20}}
    sink: {url: "SINK/paced"}
`

func TestE2EReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("end-to-end benchmark report: SLUICE_BENCH=1 (make bench)")
	}
	const (
		inflight = 64
		measure  = 3 * time.Second // per round
		nkeys    = 1000
	)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	sink := startCountingSink(t, time.Millisecond)
	// SLUICE_BENCH_DEBUG_ADDR serves the first ingress's pprof there; SLUICE_BENCH_PROFILE
	// names a file for a CPU profile of it taken during sluice's first admission round.
	debugAddr := os.Getenv("SLUICE_BENCH_DEBUG_ADDR")
	c := startCluster(t, clusterOptions{rules: strings.ReplaceAll(reportRules, "COUNTING_SINK", sink.URL), drainerWorkers: 64, debugAddr: debugAddr})
	// Drainers off while admission is measured: the drain is measured on its own below.
	for _, d := range c.drainers {
		if err := d.Term(15 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v", d.Name(), err)
		}
	}

	// 1. Admission, in alternating rounds against two ceilings measured on the same
	// cluster in the same run: a bare HTTP publish handler (integration/testdata/barepub,
	// 2 processes, as the ingresses: read the body, publish it to an R3 stream, answer 202
	// after the PubAck) and publishing straight to an R3 stream from this process (no HTTP
	// at all). Closed loop, 64 requests in flight, the same keys and bodies for each.
	nc, err := nats.Connect(c.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	for name, subject := range map[string]string{"BENCH_BARE": "bare.>", "BENCH_HTTP": "barehttp.>"} {
		_, err = js.CreateStream(bctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Replicas: 3,
			Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew,
			DiscardNewPerSubject: true, MaxMsgsPerSubject: 1000, Duplicates: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
	}
	bcancel()
	binDir := t.TempDir()
	if err := proctest.Build(binDir, "./integration/testdata/barepub"); err != nil {
		t.Fatal(err)
	}
	var bare []*proctest.Proc
	for i := range 2 {
		p := c.startProc(proctest.Spec{Name: fmt.Sprint("barepub-", i), Bin: filepath.Join(binDir, "barepub"), ReadyMsg: "barepub: listening",
			Args: []string{"-http", "127.0.0.1:0", "-nats", c.natsURL, "-keys", fmt.Sprint(nkeys)}})
		if p == nil {
			t.FailNow()
		}
		bare = append(bare, p)
	}
	body := func(w, i int) string {
		return submitBody("bench", []kv{{"user_id", fmt.Sprintf("u-%04d", (w*7919+i)%nkeys)}}, fmt.Sprintf(`{"s":%d}`, w<<24|i))
	}
	type target struct {
		name string
		send func(ctx context.Context, w, i int) bool
		runs []float64
		lats [][]time.Duration
	}
	var admitted atomic.Int64
	targets := []*target{
		{name: "sluice", send: func(ctx context.Context, w, i int) bool {
			if c.do(ctx, "POST", c.ingress[w%2].URL()+"/v1/messages", body(w, i), nil).Code == 202 {
				admitted.Add(1)
				return true
			}
			return false
		}},
		{name: "bare handler", send: func(ctx context.Context, w, i int) bool {
			return c.do(ctx, "POST", bare[w%2].URL()+"/v1/messages", body(w, i), nil).Code == 202
		}},
		{name: "raw publish", send: func(ctx context.Context, w, i int) bool {
			_, err := js.Publish(ctx, fmt.Sprintf("bare.u-%04d", (w*7919+i)%nkeys), []byte(fmt.Sprintf(`{"s":%d}`, i)),
				jetstream.WithMsgID(fmt.Sprintf("%d-%d-%d", time.Now().UnixNano(), w, i)))
			return err == nil
		}},
	}
	profiled := false
	round := func(tg *target) {
		if tg == targets[0] && !profiled && debugAddr != "" && os.Getenv("SLUICE_BENCH_PROFILE") != "" {
			profiled = true
			go func() {
				if err := saveProfile("http://"+debugAddr+"/debug/pprof/profile?seconds=2", os.Getenv("SLUICE_BENCH_PROFILE")); err != nil {
					t.Logf("profile: %v", err)
				}
			}()
		}
		var ok atomic.Int64
		lats := make([][]time.Duration, inflight)
		ctx, cancel := context.WithTimeout(context.Background(), measure)
		defer cancel()
		start := time.Now()
		var wg sync.WaitGroup
		for w := range inflight {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					s := time.Now()
					if tg.send(ctx, w, i) {
						ok.Add(1)
						lats[w] = append(lats[w], time.Since(s))
					}
				}
			})
		}
		wg.Wait()
		tg.runs = append(tg.runs, float64(ok.Load())/time.Since(start).Seconds())
		tg.lats = append(tg.lats, lats...)
	}
	for r := range rounds {
		for i := range targets {
			round(targets[(r+i)%len(targets)]) // the order turns each round
		}
	}
	// The queue rule keeps at most 1000 messages per key: the rounds stay under it.
	sluiceT, bareT, rawT := targets[0], targets[1], targets[2]
	ratios := func(a, b *target) (med, lo, hi float64) {
		var rs []float64
		for i := range a.runs {
			rs = append(rs, a.runs[i]/b.runs[i])
		}
		sort.Float64s(rs)
		return rs[len(rs)/2], rs[0], rs[len(rs)-1]
	}
	median := func(v []float64) float64 {
		v = append([]float64(nil), v...)
		sort.Float64s(v)
		return v[len(v)/2]
	}
	vsBare, vsBareLo, vsBareHi := ratios(sluiceT, bareT)
	vsRaw, vsRawLo, vsRawHi := ratios(sluiceT, rawT)
	admitP50, admitP99 := percentiles(sluiceT.lats)
	bareP50, bareP99 := percentiles(bareT.lats)
	rawP50, rawP99 := percentiles(rawT.lats)
	for _, p := range bare {
		p.Term(5 * time.Second)
	}

	// 3. Drain: the admitted backlog through 2 drainer processes, from the sink's first
	// delivery to its last (the drainers' start is not the drain).
	for _, d := range c.drainers {
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if !waittest.Within(time.Minute, func() bool { return sink.total() > 0 }) {
		t.Fatalf("no delivery within a minute of the drainers' start")
	}
	drainStart, drained0 := time.Now(), sink.total()
	if !waittest.Within(10*time.Minute, func() bool { return sink.total() >= admitted.Load() }) {
		t.Errorf("drained %d of %d in 10 min", sink.total(), admitted.Load())
	}
	drainRate := float64(sink.total()-drained0) / time.Since(drainStart).Seconds()

	// 4. The ceiling does the drainers' visible work by hand: get the first message of a
	// subject, POST it to the same sink with the same headers, delete it, and file a
	// delivered record (-status-keep is on in this cluster) in an R3 stream of the same
	// shape, asynchronously as the drainer does; the same concurrency as the drainers'
	// workers (2 × 64), keys split among them.
	stream, err := js.Stream(context.Background(), "BENCH_BARE")
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	if _, err := js.CreateStream(rctx, jetstream.StreamConfig{Name: "BENCH_RECORDS", Subjects: []string{"benchrec.>"}, Replicas: 3,
		Storage: jetstream.FileStorage, MaxAge: time.Hour, MaxMsgs: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	rcancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, DisableCompression: true}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	var popped atomic.Int64
	var wg sync.WaitGroup
	popStart := time.Now()
	popCtx, popCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	for w := 0; w < 128; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < nkeys; k += 128 {
				key := fmt.Sprintf("u-%04d", k)
				subj := "bare." + key
				for popCtx.Err() == nil {
					m, err := stream.GetMsg(popCtx, 0, jetstream.WithGetMsgSubject(subj))
					if err != nil {
						break // empty (ErrMsgNotFound) or timed out
					}
					req, _ := http.NewRequestWithContext(popCtx, http.MethodPost, sink.URL+"/ceiling", strings.NewReader(string(m.Data)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Sluice-Key", key)
					req.Header.Set("Sluice-Id", fmt.Sprint(m.Sequence))
					resp, err := hc.Do(req)
					if err != nil {
						break
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if stream.DeleteMsg(popCtx, m.Sequence) == nil {
						popped.Add(1)
					}
					rec := &nats.Msg{Subject: "benchrec." + key, Header: nats.Header{"Sluice-Id": []string{fmt.Sprint(m.Sequence)}, "Sluice-Attempt": []string{"1"}}}
					js.PublishMsgAsync(rec)
				}
			}
		}()
	}
	wg.Wait()
	popCancel()
	popRate := float64(popped.Load()) / time.Since(popStart).Seconds()

	// 5. Outflow error: one key at 20/s with a backlog, 5 s of steady state.
	for i := 0; i < 150; i++ {
		if r := c.submit(i%2, "bench", []kv{{"paced_id", "p-1"}}, fmt.Sprintf(`{"p":%d}`, i), ""); r.Code != 202 {
			t.Fatalf("paced: %d %v %v", r.Code, r.Body, r.Err)
		}
	}
	c.waitRule("paced", 20, 30*time.Second)
	from := time.Now()
	time.Sleep(5 * time.Second) // the measurement window
	paced := countIn(deliveriesOf(c.sink.All(), "paced", "p-1"), from, from.Add(5*time.Second))
	pacedRate := float64(paced) / 5
	outflowErr := (pacedRate - 20) / 20

	var b strings.Builder
	fmt.Fprintf(&b, "# sluice end-to-end benchmark\n\nProduced by `SLUICE_BENCH=1 go test ./integration -run TestE2EReport` on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %s. Everything on this one machine: 3 embedded NATS nodes (R3) and the load generator in the test process, redis-server, 2 ingress and 2 drainer processes.\n\n", machine())
	fmt.Fprintf(&b, "Admission: %d alternating rounds of %v each (the order turns each round), %d requests in flight, %d keys; medians of the rounds, and the per-round ratio's range.\n\n", rounds, measure, inflight, nkeys)
	b.WriteString("| measure | sluice | bare ceiling (same run) | ratio (per-round range) |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| admission, req/s (2 ingress processes) | %.0f | %.0f (bare HTTP publish handler, 2 processes, R3 stream of the same shape) | %.2f (%.2f–%.2f) |\n", median(sluiceT.runs), median(bareT.runs), vsBare, vsBareLo, vsBareHi)
	fmt.Fprintf(&b, "| admission, req/s | %.0f | %.0f (JetStream publish from the test process, no HTTP) | %.2f (%.2f–%.2f) |\n", median(sluiceT.runs), median(rawT.runs), vsRaw, vsRawLo, vsRawHi)
	fmt.Fprintf(&b, "| admission p50 / p99 | %v / %v | bare handler %v / %v; publish %v / %v | %.2f (p99 vs bare handler) |\n", admitP50.Round(10*time.Microsecond), admitP99.Round(10*time.Microsecond),
		bareP50.Round(10*time.Microsecond), bareP99.Round(10*time.Microsecond), rawP50.Round(10*time.Microsecond), rawP99.Round(10*time.Microsecond), float64(admitP99)/float64(bareP99))
	fmt.Fprintf(&b, "| drain, msgs/s (2 drainer processes × 64 workers, %d keys, HTTP sink) | %.0f | %.0f (by hand: get + the same POST + delete + delivered record, 128 goroutines) | %.2f |\n", nkeys, drainRate, popRate, drainRate/popRate)
	fmt.Fprintf(&b, "| outflow error, one key at 20/s over 5 s | %+.1f%% (%.1f/s) | | |\n", 100*outflowErr, pacedRate)
	t.Log("\n" + b.String())
	if err := os.MkdirAll("results", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("results", "bench.md"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if outflowErr > 0.06 || outflowErr < -0.1 {
		t.Errorf("outflow %.1f/s at 20/s", pacedRate)
	}
}

func percentiles(per [][]time.Duration) (p50, p99 time.Duration) {
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return pct(all, 0.5), pct(all, 0.99)
}

// machine describes the CPU and memory.
func machine() string {
	model := ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int64
			if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); n == 1 {
				mem = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%d cores (%s), %s, %s %s/%s", runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// saveProfile saves the profile a pprof endpoint serves at url (a CPU profile takes its
// seconds to answer) to file.
func saveProfile(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}
