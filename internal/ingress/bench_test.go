package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// load drives url with conns keep-alive connections for d, cycling over bodies, and
// returns the request rate, the p99 latency and the count of non-2xx answers.
func load(t *testing.T, url string, conns int, d time.Duration, bodies [][]byte) (rate float64, p99 time.Duration, bad int64) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	var failed atomic.Int64
	lats := make([][]time.Duration, conns)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < conns; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				b := bodies[next.Add(1)%int64(len(bodies))]
				t0 := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(b))
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lats[g] = append(lats[g], time.Since(t0))
				if resp.StatusCode/100 != 2 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		t.Fatal("no request completed")
	}
	return float64(len(all)) / elapsed.Seconds(), all[len(all)*99/100], failed.Load()
}

// TestAdmissionReport measures the ingress's admission throughput against a bare net/http
// handler that does one JetStream publish and waits for the ack, on the same embedded NATS
// server, in the same run: queue rule, 10k distinct keys, 128-byte payloads, 64 connections.
func TestAdmissionReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	const conns, keys = 64, 10000
	dur := 4 * time.Second
	payload := fmt.Sprintf(`{"order":%q}`, bytes.Repeat([]byte("x"), 128-12))
	bodies := make([][]byte, keys)
	for i := range bodies {
		bodies[i] = []byte(fmt.Sprintf(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":%s}`, i, payload))
	}

	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{TCP: true})

	// The bare ceiling: read the body, publish it to a stream, wait for the ack, answer 202.
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BARE", Subjects: []string{"bare.>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	bare := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if _, err := js.Publish(r.Context(), fmt.Sprintf("bare.k%d", seq.Add(1)%keys), b); err != nil {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	})}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go bare.Serve(ln)
	defer bare.Close()

	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10000, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", rulesPath, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	if which := os.Getenv("SLUICE_BENCH_PROFILE"); which != "" { // only one of them, for a CPU profile
		url := "http://" + m.Addr.String() + "/v1/messages"
		if which == "bare" {
			url = "http://" + ln.Addr().String()
		}
		rate, p99, _ := load(t, url, conns, 10*time.Second, bodies)
		t.Logf("ingress only: %.0f req/s p99 %v", rate, p99)
		rdb := redis.NewClient(r.Options())
		defer rdb.Close()
		stats, _ := rdb.Info(ctx, "commandstats").Result()
		t.Logf("redis:\n%s", stats)
		return
	}
	// Warm up both, then measure alternately so neither gets a quieter machine.
	load(t, "http://"+ln.Addr().String(), conns, time.Second, bodies)
	load(t, "http://"+m.Addr.String()+"/v1/messages", conns, time.Second, bodies)
	var bareRate, oursRate float64
	var bareP99, oursP99 time.Duration
	var bareCPU, oursCPU, oursRedisCPU time.Duration
	var ratios []float64
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()
	// Several short alternating rounds: the machine's speed drifts by ±20 % over a minute,
	// and a ratio is only fair between runs that saw the same machine.
	const rounds = 4
	for round := 0; round < rounds; round++ {
		c0, _ := cpuTime(rdb)
		br, bp, bb := load(t, "http://"+ln.Addr().String(), conns, dur, bodies)
		c1, r1 := cpuTime(rdb)
		or, op, ob := load(t, "http://"+m.Addr.String()+"/v1/messages", conns, dur, bodies)
		c2, r2 := cpuTime(rdb)
		bareCPU += time.Duration(float64(c1-c0) / (br * dur.Seconds()) / rounds)
		oursCPU += time.Duration(float64(c2-c1) / (or * dur.Seconds()) / rounds)
		oursRedisCPU += time.Duration(float64(r2-r1) / (or * dur.Seconds()) / rounds)
		if bb > 0 || ob > 0 {
			t.Errorf("non-2xx answers: bare %d, ingress %d", bb, ob)
		}
		bareRate, oursRate = bareRate+br/rounds, oursRate+or/rounds
		bareP99, oursP99 = max(bareP99, bp), max(oursP99, op)
		ratios = append(ratios, or/br)
	}
	slices.Sort(ratios)
	t.Logf("admission, %d connections, %d keys, 128-byte payloads, %d cores, %d rounds of %v each:", conns, keys, runtimeCPU(), rounds, dur)
	t.Logf("  bare publish handler: %8.0f req/s  p99 %v", bareRate, bareP99.Round(10*time.Microsecond))
	t.Logf("  sluice ingress:       %8.0f req/s  p99 %v", oursRate, oursP99.Round(10*time.Microsecond))
	t.Logf("  ratio ingress/bare:   %.2f× (rounds %.2f–%.2f; goal ≥ 0.80×)", oursRate/bareRate, ratios[0], ratios[len(ratios)-1])
	// CPU per request (this process: load generator, HTTP server, NATS server; plus the
	// redis-server process) is what the machine's load does not distort much.
	t.Logf("  CPU per request:      bare %v, ingress %v (%.2f×)", bareCPU.Round(time.Microsecond), oursCPU.Round(time.Microsecond), float64(bareCPU)/float64(oursCPU))
	t.Logf("  of which redis-server: %v", oursRedisCPU.Round(time.Microsecond))
}

func runtimeCPU() int { return runtime.NumCPU() }

// cpuTime is the CPU time used so far by this process and by the redis-server of rdb
// together, and by the redis-server alone.
func cpuTime(rdb *redis.Client) (total, redisCPU time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	info, _ := rdb.Info(context.Background(), "cpu").Result()
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			redisCPU += time.Duration(f * float64(time.Second))
		}
	}
	return time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + redisCPU, redisCPU
}
