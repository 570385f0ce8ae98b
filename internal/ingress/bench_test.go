package ingress_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
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

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/loadtest"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// load drives url with conns keep-alive connections for d, cycling over bodies, and
// returns the request rate, the p99 latency and the count of non-2xx answers. With idem.key,
// every request carries an Idempotency-Key of its own; with idem.depth, Prefer:
// return=representation (the 202's depth and eta asked for).
func load(t *testing.T, url string, conns int, d time.Duration, bodies [][]byte, idem asking) (rate float64, p99 time.Duration, bad int64) {
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
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for g := 0; g < conns; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n := next.Add(1)
				t0 := time.Now()
				if !send(client, url, bodies[n%int64(len(bodies))], idem, run, n) {
					failed.Add(1)
				}
				lats[g] = append(lats[g], time.Since(t0))
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

// send posts one request and reports whether it was answered 2xx — a batch only when it
// has no refused item.
func send(client *http.Client, url string, body []byte, idem asking, run string, n int64) bool {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if idem.key {
		req.Header.Set("Idempotency-Key", run+"-"+strconv.FormatInt(n, 10))
	}
	if idem.depth {
		req.Header.Set("Prefer", "return=representation")
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	var head [64]byte
	h, _ := io.ReadFull(resp.Body, head[:])
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if bytes.HasPrefix(head[:h], []byte(`{"accepted":`)) && !bytes.Contains(head[:h], []byte(`"refused":0,`)) {
		return false
	}
	return resp.StatusCode/100 == 2
}

// loadAt offers rate requests a second to url for d, open loop (each request has its
// time, whether or not earlier ones were answered), and returns the p99 latency measured
// from each request's time and the count of failures.
func loadAt(t *testing.T, url string, rate float64, d time.Duration, bodies [][]byte, idem asking) (p99 time.Duration, bad int64) {
	t.Helper()
	const workers = 256
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	total := int(rate * d.Seconds())
	due := make(chan time.Time, total)
	lats := make([]time.Duration, total)
	var failed atomic.Int64
	var idx atomic.Int64
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for at := range due {
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait) // the load's schedule: requests at a fixed rate
				}
				n := idx.Add(1) - 1
				if !send(client, url, bodies[n%int64(len(bodies))], idem, run, n) {
					failed.Add(1)
				}
				lats[n] = time.Since(at)
			}
		})
	}
	start := time.Now().Add(10 * time.Millisecond)
	every := time.Duration(float64(time.Second) / rate)
	for i := 0; i < total; i++ {
		due <- start.Add(time.Duration(i) * every)
	}
	close(due)
	wg.Wait()
	slices.Sort(lats)
	return lats[len(lats)*99/100], failed.Load()
}

// asking is what a load's requests carry beyond the body.
type asking struct {
	key   bool // an Idempotency-Key of its own on every request
	depth bool // Prefer: return=representation (the 202's depth and eta)
}

// contender is one admission path of the report.
type contender struct {
	name string
	url  string
	idem asking
	pid  int // another process whose CPU counts (the Node server of BullMQ), or 0
}

// TestAdmissionReport measures the ingress's admission throughput against a bare net/http
// handler that does one JetStream publish and waits for the ack, and against the task
// queues users would pick instead on the same redis-server — hibiken/asynq's Enqueue (Go)
// and BullMQ's queue.add (Node, if node and npm are installed) — each behind a minimal
// HTTP server, with and without idempotency keys (asynq's TaskID, BullMQ's jobId), in the
// same run: queue rule, 10k distinct keys, 128-byte payloads, 64 connections, alternating
// rounds; then p99 at a fixed offered rate.
func TestAdmissionReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	const conns, keys = 64, 10000
	dur := 3 * time.Second
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	payload := fmt.Sprintf(`{"order":%q}`, bytes.Repeat([]byte("x"), 128-12))
	bodies := make([][]byte, keys)
	for i := range bodies {
		bodies[i] = []byte(fmt.Sprintf(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":%s}`, i, payload))
	}

	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{TCP: true})
	ctx := context.Background()
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()

	// The bare ceiling: read the body, publish it to a stream, wait for the ack, answer 202.
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// The same shape as a queue rule's stream (queue.Queues): a key's capacity enforced by the
	// server (DiscardNewPerSubject), a duplicate window; the publish itself carries no msg id.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BARE", Subjects: []string{"bare.>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
		MaxMsgsPerSubject: benchCapacity, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	bareURL := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if _, err := js.Publish(r.Context(), fmt.Sprintf("bare.k%d", seq.Add(1)%keys), b); err != nil {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))

	// asynq: Enqueue of the body as a task, TaskID from the Idempotency-Key (a repeat is
	// ErrTaskIDConflict, answered 200 as sluice answers a repeat).
	aq := asynq.NewClientFromRedisClient(redis.NewClient(r.Options()))
	defer aq.Close()
	asynqURL := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		opts := []asynq.Option{asynq.Queue("orders"), asynq.Retention(0)}
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			opts = append(opts, asynq.TaskID(k))
		}
		if _, err := aq.EnqueueContext(r.Context(), asynq.NewTask("order", b), opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(202)
	}))

	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: `+strconv.Itoa(benchCapacity)+`, outflow: {unit: second, requests_per_unit: 10}}
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
	sluiceURL := "http://" + m.Addr.String() + "/v1/messages"
	// The same ingress with -engine claim (on the same NATS and Redis, its own rules' streams
	// shared): every admission also counts its key's depth and marks it due in Redis, as
	// before the own engine, and answers depth and eta unasked.
	claimCfg, err := ingress.ParseFlags([]string{"-rules", rulesPath, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(), "-engine", "claim"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mc := &ingress.Main{Config: claimCfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := mc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	claimURL := "http://" + mc.Addr.String() + "/v1/messages"

	// SLUICE_BENCH_PROFILE=sluice (or idempotent: with idempotency keys; depth: with the
	// 202's depth asked for; claim: the -engine claim ingress; bare: the bare
	// handler; floor, floor-idempotent: the floor handlers with Redis; floor-answer: rung 2,
	// the plain admission's floor) drives only that one for 10 s, for
	// `go test -cpuprofile`.
	if which := os.Getenv("SLUICE_BENCH_PROFILE"); which != "" {
		url := sluiceURL
		switch which {
		case "bare":
			url = bareURL
		case "claim":
			url = claimURL
		case "floor", "floor-idempotent", "floor-answer":
			rung := map[string]string{"floor": "floor: + per-key Redis", "floor-idempotent": "floor: + idempotency key",
				"floor-answer": "floor: + answer"}[which]
			floors := admissionFloors(t, js, rdb)
			url = floors[slices.IndexFunc(floors, func(c contender) bool { return c.name == rung })].url
		}
		rate, p99, _ := load(t, url, conns, 10*time.Second, bodies, asking{key: which == "idempotent" || which == "floor-idempotent", depth: which == "depth"})
		t.Logf("%s only: %.0f req/s p99 %v", which, rate, p99)
		stats, _ := rdb.Info(ctx, "commandstats").Result()
		t.Logf("redis:\n%s", stats)
		return
	}

	cs := []contender{
		{name: "bare JetStream publish", url: bareURL},
		{name: "sluice ingress", url: sluiceURL},
		{name: "sluice, depth asked", url: sluiceURL, idem: asking{depth: true}},
		{name: "sluice, engine claim", url: claimURL},
		{name: "sluice, idempotency keys", url: sluiceURL, idem: asking{key: true}},
		{name: "asynq Enqueue", url: asynqURL},
		{name: "asynq, TaskID", url: asynqURL, idem: asking{key: true}},
	}
	if os.Getenv("SLUICE_BENCH_FLOOR") != "" { // the ladder from the bare handler to sluice (floor_bench_test.go)
		cs = slices.Insert(cs, 1, admissionFloors(t, js, rdb)...)
	}
	if !selected("BullMQ queue.add") && !selected("BullMQ, jobId") {
		t.Logf("BullMQ left out: not in SLUICE_BENCH_ONLY")
	} else if url, pid, err := startBullMQ(t, r.Addr()); err != nil {
		t.Logf("BullMQ left out: %v", err)
	} else {
		cs = append(cs, contender{name: "BullMQ queue.add", url: url, pid: pid}, contender{name: "BullMQ, jobId", url: url, idem: asking{key: true}, pid: pid})
	}
	cs = slices.DeleteFunc(cs, func(c contender) bool { return !selected(c.name) })
	for i := 0; i < len(cs); i++ { // warm up every one; one that cannot admit is left out
		if _, _, bad := load(t, cs[i].url, conns, time.Second, bodies, cs[i].idem); bad > 0 {
			t.Errorf("%s left out: %d non-2xx answers while warming up", cs[i].name, bad)
			cs = slices.Delete(cs, i, i+1)
			i--
		}
	}
	rates := make([][]float64, len(cs))
	p99s := make([]time.Duration, len(cs))
	cpu := make([]time.Duration, len(cs))
	redisCPU := make([]time.Duration, len(cs))
	// Short alternating rounds: the machine's speed drifts over a minute, and a ratio is
	// only fair between runs that saw the same machine.
	for round := 0; round < rounds; round++ {
		for i, c := range cs {
			c0, r0 := cpuTime(rdb, c.pid)
			rate, p99, bad := load(t, c.url, conns, dur, bodies, c.idem)
			c1, r1 := cpuTime(rdb, c.pid)
			if bad > 0 {
				t.Errorf("%s: %d non-2xx answers", c.name, bad)
			}
			rates[i] = append(rates[i], rate)
			p99s[i] = max(p99s[i], p99)
			reqs := rate * dur.Seconds() * float64(rounds)
			cpu[i] += time.Duration(float64(c1-c0) / reqs)
			redisCPU[i] += time.Duration(float64(r1-r0) / reqs)
		}
	}
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	t.Logf("admission, %d connections, %d keys, 128-byte payloads, %d cores, %d alternating rounds of %v; median (min–max) req/s:", conns, keys, runtimeCPU(), rounds, dur)
	for i, c := range cs {
		t.Logf("  %-26s %7.0f (%6.0f–%6.0f)  p99 %-8v CPU/request %v (redis-server %v)", c.name, med(rates[i]), slices.Min(rates[i]), slices.Max(rates[i]),
			p99s[i].Round(10*time.Microsecond), cpu[i].Round(time.Microsecond), redisCPU[i].Round(time.Microsecond))
	}
	at := func(name string) int { return slices.IndexFunc(cs, func(c contender) bool { return c.name == name }) }
	ratio := func(label, a, b, goal string) {
		i, j := at(a), at(b)
		if i < 0 || j < 0 {
			return
		}
		var rs []float64
		for k := range rates[i] {
			rs = append(rs, rates[i][k]/rates[j][k])
		}
		t.Logf("  %-34s %.2f× (rounds %.2f–%.2f)%s", label, med(rs), slices.Min(rs), slices.Max(rs), goal)
	}
	ratio("sluice / bare publish:", "sluice ingress", "bare JetStream publish", "  goal ≥ 0.80×")
	ratio("sluice depth asked / bare:", "sluice, depth asked", "bare JetStream publish", "")
	ratio("sluice engine claim / bare:", "sluice, engine claim", "bare JetStream publish", "")
	ratio("sluice / sluice engine claim:", "sluice ingress", "sluice, engine claim", "")
	ratio("floor: id alone / bare:", "floor: id alone", "bare JetStream publish", "")
	ratio("floor: id alone + Redis / bare:", "floor: id alone + Redis", "bare JetStream publish", "")
	ratio("floor: id alone + Redis / asynq:", "floor: id alone + Redis", "asynq Enqueue", "")
	ratio("floor: id alone + Redis / BullMQ:", "floor: id alone + Redis", "BullMQ queue.add", "")
	ratio("floor: message / bare:", "floor: message", "bare JetStream publish", "")
	ratio("floor: + answer / bare:", "floor: + answer", "bare JetStream publish", "")
	ratio("floor: + per-key Redis / bare:", "floor: + per-key Redis", "bare JetStream publish", "")
	ratio("sluice / floor: + per-key Redis:", "sluice ingress", "floor: + per-key Redis", "")
	ratio("floor: + per-key Redis / asynq:", "floor: + per-key Redis", "asynq Enqueue", "")
	ratio("floor: + per-key Redis / BullMQ:", "floor: + per-key Redis", "BullMQ queue.add", "")
	ratio("floor: + idempotency / + Redis:", "floor: + idempotency key", "floor: + per-key Redis", "")
	ratio("sluice idempotent / its floor:", "sluice, idempotency keys", "floor: + idempotency key", "")
	ratio("floor: + idempotency / TaskID:", "floor: + idempotency key", "asynq, TaskID", "")
	ratio("floor: + idempotency / jobId:", "floor: + idempotency key", "BullMQ, jobId", "")
	ratio("sluice idempotent / sluice:", "sluice, idempotency keys", "sluice ingress", "  goal ≥ 0.90×")
	ratio("sluice / asynq:", "sluice ingress", "asynq Enqueue", "  goal ≥ 1.0×")
	ratio("sluice idempotent / asynq TaskID:", "sluice, idempotency keys", "asynq, TaskID", "  goal ≥ 1.0×")
	ratio("sluice / BullMQ:", "sluice ingress", "BullMQ queue.add", "  goal ≥ 1.5×")
	ratio("sluice idempotent / BullMQ jobId:", "sluice, idempotency keys", "BullMQ, jobId", "  goal ≥ 1.5×")
	// p99 at a fixed offered rate, open loop.
	const offered = 10000.0
	for _, c := range cs {
		p99, bad := loadAt(t, c.url, offered, 3*time.Second, bodies, c.idem)
		t.Logf("  p99 at %.0f req/s offered: %-26s %v (%d failed)", offered, c.name, p99.Round(10*time.Microsecond), bad)
	}
}

// selected reports whether the contender named name is in the report: every one, unless
// SLUICE_BENCH_ONLY lists some (comma-separated prefixes of their names, e.g.
// "bare,sluice ingress" for a quicker A/B).
func selected(name string) bool {
	only := os.Getenv("SLUICE_BENCH_ONLY")
	if strings.TrimSpace(only) == "" {
		return true
	}
	for _, p := range strings.Split(only, ",") {
		if p = strings.TrimSpace(p); p != "" && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// benchCapacity is the capacity of the admission report's queue rule, which the floor
// handlers answer with too.
const benchCapacity = 10000

// serve runs h on a loopback port and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// startBullMQ installs BullMQ (once, in the user's cache) and runs a minimal Node server
// whose handler calls queue.add with the body (jobId from the Idempotency-Key), with
// removeOnComplete as its users set it. It returns the server's URL and pid.
func startBullMQ(t *testing.T, redisAddr string) (string, int, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", 0, fmt.Errorf("no node: %w", err)
	}
	dir, err := loadtest.InstallBullMQ()
	if err != nil {
		return "", 0, err
	}
	host, port, _ := net.SplitHostPort(redisAddr)
	script := `
const http = require('http');
const { Queue } = require('bullmq');
const q = new Queue('orders', { connection: { host: ` + strconv.Quote(host) + `, port: ` + port + ` },
  defaultJobOptions: { removeOnComplete: true } });
const srv = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const id = req.headers['idempotency-key'];
  try {
    await q.add('order', JSON.parse(Buffer.concat(chunks)), id ? { jobId: id } : {});
    res.writeHead(202); res.end();
  } catch (e) { res.writeHead(503); res.end(String(e)); }
});
srv.keepAliveTimeout = 60000;
srv.listen(0, '127.0.0.1', () => console.log('listening ' + srv.address().port));
`
	path := filepath.Join(dir, "server.js")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return "", 0, err
	}
	cmd := exec.Command(node, path)
	cmd.Dir = dir
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", 0, fmt.Errorf("BullMQ server: %v", err)
	}
	p, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		return "", 0, fmt.Errorf("BullMQ server said %q", line)
	}
	return "http://127.0.0.1:" + p, cmd.Process.Pid, nil
}

func runtimeCPU() int { return runtime.NumCPU() }

// cpuTime is the CPU time used so far by this process, the redis-server of rdb and process
// pid (when not 0) together, and by the redis-server alone.
func cpuTime(rdb *redis.Client, pid int) (total, redisCPU time.Duration) {
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
	return time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + redisCPU + loadtest.ProcCPU(pid), redisCPU
}

// TestBatchReport measures batch submission: messages/s admitted through batches of 100
// against single submissions on the same connections, and against the ceiling of one Go
// client async-publishing the same messages straight to JetStream (no HTTP, no Redis).
// CPU per message is this process's (load generator, ingress and embedded nats-server)
// and redis-server's. SLUICE_BENCH_PROFILE=batch (or single, ceiling, ceiling-same) drives only that one for 10 s,
// for `go test -cpuprofile`.
func TestBatchReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	const conns, keys, per = 16, 10000, 100
	dur := 3 * time.Second
	payload := fmt.Sprintf(`{"order":%q}`, bytes.Repeat([]byte("x"), 128-12))
	item := func(i int) string {
		return fmt.Sprintf(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":%s}`, i%keys, payload)
	}
	singles := make([][]byte, keys)
	for i := range singles {
		singles[i] = []byte(item(i))
	}
	batches := make([][]byte, keys/per)
	for b := range batches {
		var parts []string
		for i := 0; i < per; i++ {
			parts = append(parts, item(b*per+i))
		}
		batches[b] = []byte("[" + strings.Join(parts, ",") + "]")
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{TCP: true})
	ctx := context.Background()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 1000000, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", rulesPath, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(),
		"-max-body", "4194304"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	url := "http://" + m.Addr.String() + "/v1/messages"

	// The ceiling: one client async-publishing the same messages, up to 2000 acks outstanding.
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CEILING", Subjects: []string{"ceiling.>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	// asyncCeiling async-publishes msg(n) for n = 0, 1, … for dur, up to 2000 acks
	// outstanding, and returns how many it published.
	asyncCeiling := func(msg func(n int) *nats.Msg) func() float64 {
		return func() float64 {
			start := time.Now()
			sent := 0
			for time.Since(start) < dur {
				for i := 0; i < 1000; i++ {
					if _, err := js.PublishMsgAsync(msg(sent)); err != nil {
						t.Fatal(err)
					}
					sent++
				}
				if js.PublishAsyncPending() > 1000 {
					<-js.PublishAsyncComplete()
				}
			}
			<-js.PublishAsyncComplete()
			return float64(sent)
		}
	}
	ceiling := asyncCeiling(func(n int) *nats.Msg {
		return &nats.Msg{Subject: fmt.Sprintf("ceiling.k%d", n%keys), Data: []byte(payload)}
	})
	// The same ceiling with sluice's own messages: a stream of the same shape (per-key
	// capacity, duplicate window), each message with the headers and Nats-Msg-Id an admission
	// writes, so nats-server does for it what it does for an admitted message.
	cq, err := queue.NewQueues(js, queue.Config{StreamPrefix: "CEILSAME_", SubjectPrefix: "ceilsame"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Ensure(ctx, "orders", 1000000); err != nil {
		t.Fatal(err)
	}
	ceilingSame := asyncCeiling(func(n int) *nats.Msg {
		key := "m-" + strconv.Itoa(n%keys)
		m := queue.Message{ID: uuid.NewString() + ".orders." + queue.KeyToken(key), Rule: "orders", Key: key,
			Payload: []byte(payload), CreatedAt: time.Now()}
		return queue.EncodeMessage(cq.Subject("orders", key), m)
	})
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()
	// measure runs f, which reports the messages it got admitted, and returns messages/s
	// and the CPU per message.
	measure := func(f func() float64) (rate float64, cpu, redisCPU time.Duration) {
		c0, r0 := cpuTime(rdb, 0)
		start := time.Now()
		msgs := f()
		elapsed := time.Since(start)
		c1, r1 := cpuTime(rdb, 0)
		return msgs / elapsed.Seconds(), time.Duration(float64(c1-c0) / msgs), time.Duration(float64(r1-r0) / msgs)
	}
	drive := func(bodies [][]byte, n int, d time.Duration) func() float64 {
		return func() float64 {
			rate, _, bad := load(t, url, conns, d, bodies, asking{})
			if bad > 0 {
				t.Errorf("%d answers not 2xx (or a batch with refused items)", bad)
			}
			return rate * d.Seconds() * float64(n)
		}
	}
	if which := os.Getenv("SLUICE_BENCH_PROFILE"); which != "" { // only one of them, for a CPU profile
		bodies, n := batches, per
		if which == "single" {
			bodies, n = singles, 1
		}
		f := drive(bodies, n, 10*time.Second)
		if which == "ceiling" || which == "ceiling-same" {
			dur = 10 * time.Second
			f = ceiling
			if which == "ceiling-same" {
				f = ceilingSame
			}
		} else {
			load(t, url, conns, time.Second, bodies, asking{})
		}
		rate, cpu, rcpu := measure(f)
		t.Logf("%s only: %.0f messages/s, CPU/message %v (redis-server %v)", which, rate, cpu.Round(100*time.Nanosecond), rcpu.Round(100*time.Nanosecond))
		return
	}
	load(t, url, conns, time.Second, singles, asking{})
	load(t, url, conns, time.Second, batches, asking{})
	var single, batched, ceil, ceilSame []float64
	var cpu [4]time.Duration
	var redisCPU [2]time.Duration
	for round := 0; round < 3; round++ {
		rs, cs, qs := measure(drive(singles, 1, dur))
		rb, cb, qb := measure(drive(batches, per, dur))
		rc, cc, _ := measure(ceiling)
		rd, cd, _ := measure(ceilingSame)
		single, batched, ceil, ceilSame = append(single, rs), append(batched, rb), append(ceil, rc), append(ceilSame, rd)
		cpu[0], cpu[1], cpu[2], cpu[3] = cpu[0]+cs/3, cpu[1]+cb/3, cpu[2]+cc/3, cpu[3]+cd/3
		redisCPU[0], redisCPU[1] = redisCPU[0]+qs/3, redisCPU[1]+qb/3
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	us := func(d time.Duration) string { return d.Round(100 * time.Nanosecond).String() }
	t.Logf("batch submission, %d connections, %d keys, 128-byte payloads, %d cores, 3 alternating rounds of %v (median messages/s; mean CPU per message):", conns, keys, runtimeCPU(), dur)
	t.Logf("  single submissions:        %8.0f  CPU %s (redis-server %s)", med(single), us(cpu[0]), us(redisCPU[0]))
	t.Logf("  batches of %d:            %8.0f  CPU %s (redis-server %s)  %.2f× single; goal ≥ 3×", per, med(batched), us(cpu[1]), us(redisCPU[1]), med(batched)/med(single))
	t.Logf("  JetStream async publish:   %8.0f  CPU %s  batches reach %.2f× of it", med(ceil), us(cpu[2]), med(batched)/med(ceil))
	t.Logf("  the same, sluice's messages (headers, Nats-Msg-Id, per-key capacity): %8.0f  CPU %s  batches reach %.2f× of it; goal ≥ 0.6×", med(ceilSame), us(cpu[3]), med(batched)/med(ceilSame))
}
