package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/waittest"
)

// TestE2EReport measures the whole system through its processes and compares each figure
// with its bare ceiling measured in the same run on the same cluster: admission through
// 2 ingress processes vs publishing straight to an R3 stream; draining through 2 drainer
// processes vs a bare get+delete loop; outflow error. SLUICE_BENCH=1 only; the result is
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
		measure  = 10 * time.Second
		nkeys    = 1000
	)
	sink := startCountingSink(t, time.Millisecond)
	c := startCluster(t, clusterOptions{rules: strings.ReplaceAll(reportRules, "COUNTING_SINK", sink.URL), drainerWorkers: 64})
	// Drainers off while admission is measured: the drain is measured on its own below.
	for _, d := range c.drainers {
		if err := d.Term(15 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v", d.Name(), err)
		}
	}

	// 1. Admission through the 2 ingress processes, closed loop.
	var ok atomic.Int64
	lats := make([][]time.Duration, inflight)
	ctx, cancel := context.WithTimeout(context.Background(), measure)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				s := time.Now()
				r := c.do(ctx, "POST", c.ingress[w%2].URL()+"/v1/messages",
					submitBody("bench", []kv{{"user_id", fmt.Sprintf("u-%04d", (w*7919+i)%nkeys)}}, fmt.Sprintf(`{"s":%d}`, w<<24|i)), nil)
				if r.Code == 202 {
					ok.Add(1)
					lats[w] = append(lats[w], time.Since(s))
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	admitRate := float64(ok.Load()) / time.Since(start).Seconds()
	admitP50, admitP99 := percentiles(lats)
	admitted := ok.Load()

	// 2. The bare ceiling: publish straight to an R3 stream of the same shape, same
	// concurrency, from this process.
	nc, err := nats.Connect(c.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = js.CreateStream(bctx, jetstream.StreamConfig{Name: "BENCH_BARE", Subjects: []string{"bare.>"}, Replicas: 3,
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew,
		DiscardNewPerSubject: true, MaxMsgsPerSubject: 1000, Duplicates: 2 * time.Minute})
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	var bareOK atomic.Int64
	bareLats := make([][]time.Duration, inflight)
	ctx, cancel = context.WithTimeout(context.Background(), measure)
	start = time.Now()
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				s := time.Now()
				_, err := js.Publish(ctx, fmt.Sprintf("bare.u-%04d", (w*7919+i)%nkeys), []byte(fmt.Sprintf(`{"s":%d}`, i)),
					jetstream.WithMsgID(fmt.Sprintf("%d-%d", w, i)))
				if err == nil {
					bareOK.Add(1)
					bareLats[w] = append(bareLats[w], time.Since(s))
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	bareRate := float64(bareOK.Load()) / time.Since(start).Seconds()
	bareP50, bareP99 := percentiles(bareLats)

	// 3. Drain: the admitted backlog through 2 drainer processes.
	drainStart := time.Now()
	for _, d := range c.drainers {
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if !waittest.Within(10*time.Minute, func() bool { return sink.total() >= admitted }) {
		t.Errorf("drained %d of %d in 10 min", sink.total(), admitted)
	}
	drainRate := float64(sink.total()) / time.Since(drainStart).Seconds() // includes the drainers' start

	// 4. The bare pop loop: get the first message of a subject, delete it, same
	// concurrency as the drainers' workers (2 × 64), keys split among them.
	stream, err := js.Stream(context.Background(), "BENCH_BARE")
	if err != nil {
		t.Fatal(err)
	}
	var popped atomic.Int64
	popStart := time.Now()
	popCtx, popCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	for w := 0; w < 128; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < nkeys; k += 128 {
				subj := fmt.Sprintf("bare.u-%04d", k)
				for popCtx.Err() == nil {
					m, err := stream.GetMsg(popCtx, 0, jetstream.WithGetMsgSubject(subj))
					if err != nil {
						break // empty (ErrMsgNotFound) or timed out
					}
					if stream.DeleteMsg(popCtx, m.Sequence) == nil {
						popped.Add(1)
					}
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
	b.WriteString("| measure | sluice | bare ceiling (same run) | ratio |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| admission, req/s (%d in flight, 2 ingress processes, %d keys) | %.0f | %.0f (JetStream publish, R3, same stream shape) | %.2f |\n", inflight, nkeys, admitRate, bareRate, admitRate/bareRate)
	fmt.Fprintf(&b, "| admission p50 / p99 | %v / %v | %v / %v | %.2f (p99) |\n", admitP50.Round(10*time.Microsecond), admitP99.Round(10*time.Microsecond),
		bareP50.Round(10*time.Microsecond), bareP99.Round(10*time.Microsecond), float64(admitP99)/float64(bareP99))
	fmt.Fprintf(&b, "| drain, msgs/s (2 drainer processes × 64 workers, %d keys, HTTP sink) | %.0f | %.0f (get + delete loop, 128 goroutines) | %.2f |\n", nkeys, drainRate, popRate, drainRate/popRate)
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
