package drain_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/loadtest"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// TestDrainPeersReport (make bench, SLUICE_BENCH=1) is issue #31's "Drain" and "Paced at
// scale" study: a backlog of 60,000 messages of ~200 B over 1,000 and over 10,000 keys,
// drained to one HTTP sink answering 200 (it counts deliveries) by
//
//	own     the sluice drainer, engine own (one drainer; and two, for "two ÷ one")
//	claim   the sluice drainer, engine claim (the old engine)
//	hand    the same work by hand: direct get + the same POST (sluice's HTTP sink) + delete,
//	        one goroutine per worker, each owning a share of the keys — the ceiling
//	asynq   a hibiken/asynq server whose handler POSTs the task's payload to the sink
//	bullmq  a BullMQ Worker (node) doing the same POST, when node and npm are here
//
// all with the same delivery concurrency (64), against one redis-server and one embedded
// nats-server, in alternating rounds; each rate is counted at the sink from its first
// delivery to its last, so a system's start (own announces itself, then owns partitions)
// is not its throughput. CPU per delivery is split by process where it can be: this test
// process (the Go systems, the embedded nats-server, the sink and the harness share it),
// redis-server and node (/proc/<pid>/stat). Then the paced row: 1,000 keys at 4/s each with
// a deep backlog, engine own, held for 20 s.
//
// Knobs: SLUICE_BENCH_ROUNDS (3), SLUICE_BENCH_MESSAGES (60000), SLUICE_BENCH_KEYS (one key
// count instead of 1000 and 10000), SLUICE_BENCH_ONLY (comma-separated system names),
// SLUICE_BENCH_PACED_SECONDS (20; 0 leaves the paced row out).
func TestDrainPeersReport(t *testing.T) {
	benchOnly(t)
	const workers = 64
	rounds, total := envInt("SLUICE_BENCH_ROUNDS", 3), envInt("SLUICE_BENCH_MESSAGES", 60000)
	keyCounts := []int{1000, 10000}
	if k := envInt("SLUICE_BENCH_KEYS", 0); k > 0 {
		keyCounts = []int{k}
	}
	ps := newPeerSink(t)
	rsrv := redistest.Start(t, redistest.Options{TCP: true}) // TCP: BullMQ's ioredis connects to it too
	e := peerEnv(t, rsrv)
	redisPID := redisProcessID(t, e.rdb)
	hs, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bullDir, bullErr := installBullMQ()
	if bullErr != nil {
		t.Logf("BullMQ row not measured: %v", bullErr)
	}
	load0 := loadAvg()

	for _, nKeys := range keyCounts {
		perKey := (total + nKeys - 1) / nKeys
		n := int64(perKey * nKeys)
		keys := keyNames(nKeys)
		r := e.rule(fmt.Sprintf("peers%d", nKeys), 1_000_000, 0, func(r *rules.Rule) {
			r.Sink.URL = ps.url
			r.Sink.Timeout = 10 * time.Second
			r.Queue.Capacity = int64(perKey + 10)
		})
		fill := func(markDue bool) {
			peerFill(t, e.q, r.Name, keys, perKey)
			if markDue { // the claim engine learns of keys from the ingress's due marks
				if _, err := e.s.Claims.MarkDueAt(context.Background(), r.Name, time.Time{}, keys...); err != nil {
					t.Fatal(err)
				}
			}
		}
		sluiceRun := func(engine string, drainers int) peerRun {
			fill(engine == drain.EngineClaim)
			return ps.measure(t, e, redisPID, 0, n, func(ctx context.Context) func() {
				var ds []*drain.Drainer
				for range drainers {
					ds = append(ds, e.drainer(ctx, hs, func(c *drain.Config) { c.Engine = engine; c.Workers = workers }))
				}
				return func() {
					for _, d := range ds {
						d.Stop()
					}
				}
			}, func() string { return depthNote(e, r) }, func() error { return emptied(e, r) })
		}
		systems := []peerSystem{
			{name: "hand", label: "by hand: get + POST + delete (ceiling)", run: func(int) peerRun {
				fill(false)
				return ps.measure(t, e, redisPID, 0, n, func(context.Context) func() {
					// Not the round's ctx: the last deletes come after the sink counted the
					// last delivery, and the loops end by themselves once every key is empty.
					done := make(chan struct{})
					go func() { defer close(done); handDrain(context.Background(), t, e.q, hs, r, keys, workers) }()
					return func() { <-done }
				}, func() string { return depthNote(e, r) }, func() error { return emptied(e, r) })
			}},
			{name: "own", label: "sluice, engine own, 1 drainer", run: func(int) peerRun { return sluiceRun(drain.EngineOwn, 1) }},
			{name: "own2", label: "sluice, engine own, 2 drainers", run: func(int) peerRun { return sluiceRun(drain.EngineOwn, 2) }},
			{name: "claim", label: "sluice, engine claim, 1 drainer", run: func(int) peerRun { return sluiceRun(drain.EngineClaim, 1) }},
			{name: "asynq", label: "asynq worker, handler POSTs", run: func(round int) peerRun {
				return asynqRun(t, e, rsrv, ps, redisPID, fmt.Sprintf("peers-%d-%d", nKeys, round), nKeys, int(n), workers)
			}},
			{name: "bullmq", label: "BullMQ Worker (node), same POST", run: func(round int) peerRun {
				if bullErr != nil {
					return peerRun{err: bullErr}
				}
				return bullRun(t, bullDir, rsrv, ps, e, redisPID, fmt.Sprintf("peers-%d-%d", nKeys, round), nKeys, int(n), workers)
			}},
		}
		systems = slices.DeleteFunc(systems, func(s peerSystem) bool { return !peerSelected(s.name) })
		res := make([][]peerRun, len(systems))
		// The machine is shared: rounds alternate the systems so a burst of load from
		// elsewhere does not land on one side only.
		for round := 0; round < rounds; round++ {
			for i, s := range systems {
				x := s.run(round)
				res[i] = append(res[i], x)
				// Each round as it ends: a long study on a loaded machine shows what it has.
				if x.err != nil {
					t.Logf("  %d keys, round %d, %s: %v", nKeys, round+1, s.name, x.err)
				} else {
					t.Logf("  %d keys, round %d, %-6s %6.0f/s  CPU/delivery %s | redis %s | node %s  (load %s)", nKeys, round+1, s.name, x.rate, us(x.self), us(x.redis), us(x.node), loadAvg())
				}
			}
		}
		t.Logf("drain: backlog %d messages (~%d B) over %d keys, one HTTP sink answering 200, %d delivery workers each, %d alternating rounds; load average at start %s",
			n, peerPayloadSize, nKeys, workers, rounds, load0)
		t.Logf("  %-40s %-22s %-10s %s", "system", "deliveries/s median (min–max)", "startup", "CPU per delivery: this process | redis-server | node; Redis commands per delivery")
		rates := map[string][]float64{}
		for i, s := range systems {
			var rs []float64
			var self, red, node time.Duration
			var cmds float64
			var start time.Duration
			var errs []string
			for _, x := range res[i] {
				if x.err != nil {
					errs = append(errs, x.err.Error())
					continue
				}
				rs = append(rs, x.rate)
				self += x.self / time.Duration(len(res[i]))
				red += x.redis / time.Duration(len(res[i]))
				node += x.node / time.Duration(len(res[i]))
				cmds += x.cmds / float64(len(res[i]))
				start = max(start, x.startup)
			}
			if len(rs) == 0 {
				t.Logf("  %-40s not measured: %s", s.label, strings.Join(slices.Compact(errs), "; "))
				continue
			}
			rates[s.name] = rs
			nodeCol := "—"
			if node > 0 {
				nodeCol = us(node)
			}
			t.Logf("  %-40s %7.0f (%6.0f–%6.0f) %-10v %s | %s | %s; %.3f", s.label, median(rs), slices.Min(rs), slices.Max(rs), start.Round(time.Millisecond),
				us(self), us(red), nodeCol, cmds)
			if len(errs) > 0 {
				t.Logf("    %d of its rounds failed: %s", len(errs), strings.Join(slices.Compact(errs), "; "))
			}
		}
		ratio := func(a, b, goal string) {
			ra, rb := rates[a], rates[b]
			if len(ra) == 0 || len(rb) == 0 {
				t.Logf("  %s ÷ %s: not measured%s", a, b, goal)
				return
			}
			var per []float64
			for k := range min(len(ra), len(rb)) {
				per = append(per, ra[k]/rb[k])
			}
			t.Logf("  %-14s %.2f× (rounds %.2f–%.2f)%s", a+" ÷ "+b+":", median(ra)/median(rb), slices.Min(per), slices.Max(per), goal)
			t.Logf("BENCH peers-%dkeys %s/%s %.2f", nKeys, a, b, median(ra)/median(rb))
		}
		ratio("own", "hand", "  target ≥ 0.9×")
		ratio("own", "asynq", "  target ≥ 1.5×")
		ratio("own", "bullmq", "  target ≥ 1.0×")
		ratio("own2", "own", "  target ≥ 1.0×")
		ratio("own", "claim", "")
		t.Logf("  (CPU: this process holds the Go systems, the embedded nats-server, the sink and the harness, so it cannot be split further; node's is BullMQ's Worker from its start to its last delivery)")
	}

	if secs := envInt("SLUICE_BENCH_PACED_SECONDS", 20); secs > 0 && os.Getenv("SLUICE_BENCH_PACED_SECONDS") != "0" {
		pacedAtScale(t, e, ps, hs, time.Duration(secs)*time.Second)
	}
	t.Logf("load average at end %s", loadAvg())
}

// pacedAtScale: 1,000 keys at 4/s each with a deep backlog, engine own, one drainer, 64
// workers; counted at the HTTP sink over dur from 1 s after the first delivery (the
// engine's start, owning its partitions, is not the pace).
func pacedAtScale(t *testing.T, e *env, ps *peerSink, hs drain.Sink, dur time.Duration) {
	t.Helper()
	const nKeys, perSec = 1000, 4
	settle := time.Second
	perKey := int(perSec*(dur+settle).Seconds()) + 4*perSec // never runs dry within the window
	keys := keyNames(nKeys)
	r := e.rule("paced", perSec, 0, func(r *rules.Rule) {
		r.Sink.URL = ps.url
		r.Sink.Timeout = 10 * time.Second
		r.Queue.Capacity = int64(perKey + 10)
	})
	// What this machine allows right now, the same work by hand (get + POST + delete, 64
	// goroutines) over the same keys: the paced row only measures pacing when 4,000/s is
	// below it.
	cr := e.rule("paced-ceiling", 1_000_000, 0, func(r *rules.Rule) {
		r.Sink.URL = ps.url
		r.Sink.Timeout = 10 * time.Second
		r.Queue.Capacity = 40
	})
	peerFill(t, e.q, cr.Name, keys, 20)
	ps.reset(false)
	handDrain(context.Background(), t, e.q, hs, cr, keys, 64)
	ceiling := float64(ps.n.Load()-1) / time.Duration(ps.last.Load()-ps.first.Load()).Seconds()

	peerFill(t, e.q, r.Name, keys, perKey)
	ps.reset(true)
	load0 := loadAvg()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()
	d := e.drainer(ctx, hs, func(c *drain.Config) { c.Engine = drain.EngineOwn; c.Workers = 64 })
	if !waittest.Within(time.Minute, func() bool { return ps.n.Load() > 0 }) { // the sink stamps the first delivery itself
		t.Errorf("paced at scale: no delivery within a minute of the drainer's start (depth %s)", depthNote(e, r))
		d.Stop()
		return
	}
	first := time.Unix(0, ps.first.Load())
	from, to := first.Add(settle), first.Add(settle+dur)
	time.Sleep(time.Until(to)) // the scenario: the paced drain runs for dur
	d.Stop()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	in, most := 0, 0
	var mostKey string
	secs := make([]int, int(dur/time.Second))
	for k, ts := range ps.at {
		if m := maxInWindow(ts, time.Second); m > most { // every delivery of the whole run
			most, mostKey = m, k
		}
		for _, x := range ts {
			if !x.Before(from) && x.Before(to) {
				in++
				if i := int(x.Sub(from) / time.Second); i < len(secs) {
					secs[i]++
				}
			}
		}
	}
	want := float64(nKeys * perSec)
	rate := float64(in) / dur.Seconds()
	t.Logf("paced at scale: %d keys × %d/s (%.0f/s), backlog %d per key, engine own, 1 drainer × 64 workers, over %v from %v after the first delivery (startup %v); load average %s",
		nKeys, perSec, want, perKey, dur, settle, first.Sub(begin).Round(time.Millisecond), load0)
	t.Logf("  achieved %.0f/s = %.2f%% of %.0f/s (target ≥ 99%%); per 1 s: min %d max %d; keys delivered %d of %d",
		rate, 100*rate/want, want, slices.Min(secs), slices.Max(secs), len(ps.at), nKeys)
	t.Logf("  the same work by hand just before, over the same keys: %.0f/s — the configured %.0f/s is %.2f× of it%s", ceiling, want, want/ceiling,
		map[bool]string{true: " (above it: this run cannot show the pace, only that the engine keeps up with the machine)", false: ""}[want > ceiling])
	t.Logf("  most deliveries of one key in any 1 s window (whole run): %d (key %s; target ≤ rate + 1 = %d)", most, mostKey, perSec+1)
	t.Logf("BENCH paced-at-scale achieved/configured %.4f most-per-key-in-1s %d", rate/want, most)
}

// peerPayloadSize is the size of every message's body, for every system.
const peerPayloadSize = 200

// peerPayload is message i of key: a JSON object padded to peerPayloadSize bytes.
func peerPayload(key string, i int) []byte {
	b := fmt.Appendf(nil, `{"key":%q,"i":%d,"pad":"`, key, i)
	b = append(b, bytes.Repeat([]byte("x"), max(0, peerPayloadSize-len(b)-2))...)
	return append(b, `"}`...)
}

// peerFill publishes perKey messages for every key, round-robin over the keys (as a flood
// of many keys arrives), through EnqueueBatch in batches of 500 from 8 goroutines, so the
// backlog costs seconds, not the study's time.
func peerFill(t *testing.T, q *queue.Queues, rule string, keys []string, perKey int) {
	t.Helper()
	ctx := context.Background()
	total := perKey * len(keys)
	const batch = 500
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range 8 {
		wg.Go(func() {
			for start := range work {
				pubs := make([]queue.Publication, 0, batch)
				for j := start; j < min(total, start+batch); j++ {
					k := keys[j%len(keys)]
					pubs = append(pubs, queue.Publication{Rule: rule, Msg: queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Rule: rule, Key: k,
						Payload: peerPayload(k, j/len(keys)), CreatedAt: time.Now()}})
				}
				q.EnqueueBatch(ctx, pubs)
				for _, p := range pubs {
					if p.Err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, p.Err.Error())
					}
				}
			}
		})
	}
	for start := 0; start < total; start += batch {
		work <- start
	}
	close(work)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("filling %s: %d of %d publishes failed, first: %v", rule, f, total, firstErr.Load())
	}
}

// handDrain is the ceiling: each of conc goroutines owns a share of the keys and, key after
// key, pops the head with a direct get, POSTs it through the same HTTP sink, and deletes it.
func handDrain(ctx context.Context, t *testing.T, q *queue.Queues, hs drain.Sink, r *rules.Rule, keys []string, conc int) {
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for i := w; i < len(keys); i += conc {
				for ctx.Err() == nil {
					p, err := q.Pop(ctx, r.Name, keys[i])
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
					if err := q.Delete(ctx, r.Name, p.Seq); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// asynqRun enqueues n tasks (the same payloads) into a fresh asynq queue beforehand, then
// runs an asynq server with conc workers whose handler POSTs the payload to the sink.
func asynqRun(t *testing.T, e *env, rsrv *redistest.Server, ps *peerSink, redisPID int, name string, nKeys, n, conc int) peerRun {
	ctx := context.Background()
	cl := redis.NewClient(rsrv.Options())
	defer cl.Close()
	ac := asynq.NewClientFromRedisClient(cl)
	work := make(chan int)
	var wg sync.WaitGroup
	var enqErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for i := range work {
				k := fmt.Sprintf("key-%04d", i%nKeys)
				if _, err := ac.EnqueueContext(ctx, asynq.NewTask("deliver", peerPayload(k, i/nKeys)), asynq.Queue(name), asynq.MaxRetry(3)); err != nil {
					enqErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := enqErr.Load().(error); err != nil {
		return peerRun{err: fmt.Errorf("asynq enqueue: %w", err)}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, DisableCompression: true}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	post := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ps.url, bytes.NewReader(task.Payload()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("sink answered %d", resp.StatusCode)
		}
		return nil
	})
	return ps.measure(t, e, redisPID, 0, int64(n), func(context.Context) func() {
		srvClient := redis.NewClient(rsrv.Options())
		srv := asynq.NewServerFromRedisClient(srvClient, asynq.Config{Concurrency: conc, Queues: map[string]int{name: 1}, LogLevel: asynq.FatalLevel})
		if err := srv.Start(post); err != nil {
			t.Errorf("asynq server: %v", err)
		}
		return func() { srv.Shutdown(); srvClient.Close() }
	}, func() string {
		size, err := cl.LLen(ctx, "asynq:{"+name+"}:pending").Result()
		return fmt.Sprintf("asynq pending %d (err %v)", size, err)
	}, nil)
}

// installBullMQ installs BullMQ and ioredis (once) and writes the worker script; it returns
// the directory to run node in.
func installBullMQ() (string, error) {
	dir, err := loadtest.InstallBullMQ()
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "drain-worker.js"), []byte(bullWorkerJS), 0o644)
}

// bullWorkerJS fills a queue with n jobs (the same payloads, in bulk), says "filled", and on
// a line from stdin runs a Worker with the given concurrency whose processor POSTs the
// job's payload to the sink over keep-alive connections, as a BullMQ user writes it.
const bullWorkerJS = `
const http = require('http');
const { Queue, Worker } = require('bullmq');
const [host, port, name, sinkURL, total, nkeys, conc, size] = process.argv.slice(2);
const connection = { host, port: +port, maxRetriesPerRequest: null };
const agent = new http.Agent({ keepAlive: true, maxSockets: +conc });
const u = new URL(sinkURL);
function payload(key, i) {
  const head = '{"key":' + JSON.stringify(key) + ',"i":' + i + ',"pad":"';
  return head + 'x'.repeat(Math.max(0, +size - head.length - 2)) + '"}';
}
function post(body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, res => {
      res.resume();
      res.on('end', () => res.statusCode === 200 ? resolve() : reject(new Error('sink answered ' + res.statusCode)));
    });
    req.on('error', reject);
    req.end(body);
  });
}
(async () => {
  const q = new Queue(name, { connection });
  const n = +total, k = +nkeys;
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) {
      const key = 'key-' + String(j % k).padStart(4, '0');
      jobs.push({ name: 'deliver', data: payload(key, Math.floor(j / k)), opts: { removeOnComplete: true, attempts: 3 } });
    }
    await q.addBulk(jobs);
  }
  console.log('filled');
  process.stdin.once('data', () => {
    new Worker(name, job => post(job.data), { connection, concurrency: +conc });
  });
})().catch(e => { console.error(String(e)); process.exit(1); });
`

// bullRun runs one BullMQ round: node fills the queue, then its Worker drains it.
func bullRun(t *testing.T, dir string, rsrv *redistest.Server, ps *peerSink, e *env, redisPID int, name string, nKeys, n, conc int) peerRun {
	host, port, _ := net.SplitHostPort(rsrv.Addr())
	cmd := exec.Command("node", "drain-worker.js", host, port, name, ps.url, strconv.Itoa(n), strconv.Itoa(nKeys), strconv.Itoa(conc), strconv.Itoa(peerPayloadSize))
	cmd.Dir = dir
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return peerRun{err: fmt.Errorf("node: %w", err)}
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "filled" {
		cmd.Process.Kill()
		cmd.Wait()
		return peerRun{err: fmt.Errorf("BullMQ fill: %q %v: %s", line, err, strings.TrimSpace(stderr.String()))}
	}
	return ps.measure(t, e, redisPID, cmd.Process.Pid, int64(n), func(context.Context) func() {
		io.WriteString(stdin, "go\n")
		return func() {}
	}, func() string { return "node stderr: " + strings.TrimSpace(stderr.String()) }, nil)
}

// peerSink is the one HTTP sink of the study: it answers 200 and counts deliveries, noting
// the first and the last; with record, it keeps every delivery's time per key
// (Sluice-Key).
type peerSink struct {
	url         string
	n           atomic.Int64
	first, last atomic.Int64 // unix ns
	record      atomic.Bool
	mu          sync.Mutex
	at          map[string][]time.Time
	// want and reached: the handler that counts the want-th delivery closes reached (measure
	// waits on it). Guarded by mu.
	want    int64
	reached chan struct{}
}

func newPeerSink(t *testing.T) *peerSink {
	s := &peerSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		s.first.CompareAndSwap(0, now.UnixNano())
		s.last.Store(now.UnixNano())
		if s.record.Load() {
			k := r.Header.Get(sink.HeaderKey)
			s.mu.Lock()
			s.at[k] = append(s.at[k], now)
			s.mu.Unlock()
		}
		if s.n.Add(1) == s.target() { // last: a count that reached the total has its times noted
			s.mu.Lock()
			close(s.reached)
			s.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.SetKeepAlivesEnabled(true)
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/deliver"
	return s
}

func (s *peerSink) target() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.want
}

// expect makes the sink close the returned channel at its n-th delivery from now (0: never).
func (s *peerSink) expect(n int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.reached = n, make(chan struct{})
	return s.reached
}

func (s *peerSink) reset(record bool) {
	s.mu.Lock()
	s.at = map[string][]time.Time{}
	s.want = 0
	s.mu.Unlock()
	s.record.Store(record)
	s.n.Store(0)
	s.first.Store(0)
	s.last.Store(0)
}

// peerRun is one round of one system.
type peerRun struct {
	rate              float64       // deliveries/s from the first to the last
	self, redis, node time.Duration // CPU per delivery
	cmds              float64       // Redis commands per delivery
	startup           time.Duration // from the system's start to its first delivery
	err               error
}

type peerSystem struct {
	name, label string
	run         func(round int) peerRun
}

// measure resets the sink and Redis's command stats, starts a system (start returns its
// stop), waits until the sink has counted n deliveries — or until none has come for 30 s,
// a stall, reported with what state says — stops it and returns the round's figures.
// Deliveries beyond n are reported: each message must be delivered once.
func (s *peerSink) measure(t *testing.T, e *env, redisPID, nodePID int, n int64, start func(context.Context) func(), state func() string, left func() error) peerRun {
	t.Helper()
	s.reset(false)
	if err := e.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reached := s.expect(n)
	self0, redis0, node0 := selfCPU(), loadtest.ProcCPU(redisPID), loadtest.ProcCPU(nodePID)
	begin := time.Now()
	stop := start(ctx)
	var stalled error
	// The sink says when its n-th delivery came; a look every second only notices a stall.
	stall := time.NewTicker(time.Second)
	defer stall.Stop()
	lastN, lastChange := int64(-1), time.Now()
wait:
	for {
		select {
		case <-reached:
			break wait
		case <-stall.C:
		}
		if c := s.n.Load(); c != lastN {
			lastN, lastChange = c, time.Now()
		} else if time.Since(lastChange) > 30*time.Second {
			stalled = fmt.Errorf("stalled: %d of %d delivered, none for 30 s; %s", c, n, state())
			break
		}
	}
	self1, redis1, node1 := selfCPU(), loadtest.ProcCPU(redisPID), loadtest.ProcCPU(nodePID)
	cmds := redisCalls(t, e.rdb)
	stop() // a drainer's Stop finishes its deletes; only then its ctx ends
	cancel()
	if stalled != nil {
		t.Errorf("%v", stalled)
		return peerRun{err: stalled}
	}
	got := s.n.Load()
	if got > n {
		t.Errorf("%d deliveries of %d messages: %d more than once", got, n, got-n)
	}
	if left != nil {
		if err := left(); err != nil {
			t.Error(err)
		}
	}
	first, last := time.Unix(0, s.first.Load()), time.Unix(0, s.last.Load())
	per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	return peerRun{
		rate: float64(n-1) / last.Sub(first).Seconds(),
		self: per(self1 - self0), redis: per(redis1 - redis0), node: per(node1 - node0),
		cmds: float64(cmds) / float64(n), startup: first.Sub(begin),
	}
}

// peerEnv is the drain tests' env on a private redis-server (srv), whose CPU and command
// counts are then the study's alone.
func peerEnv(t *testing.T, srv *redistest.Server) *env {
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prefix, rdb := redistest.Prefix(t), srv.Client(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, js: js, q: q, s: s, prefix: prefix, rdb: rdb}
}

// emptied waits up to 5 s for the rule's stream to be empty once its messages were all
// delivered (the own engine's deletes are asynchronous), and otherwise purges it, so the next
// round starts from the same backlog, and says how many messages were left.
func emptied(e *env, r *rules.Rule) error {
	var st queue.Stats
	var err error
	if waittest.Within(5*time.Second, func() bool {
		st, err = e.q.Stats(context.Background(), r.Name)
		return err == nil && st.Msgs == 0
	}) {
		return nil
	}
	_ = e.q.Purge(context.Background(), r.Name)
	return fmt.Errorf("%d messages left in %s after every message was delivered (err %v): deletes lost", st.Msgs, e.q.StreamName(r.Name), err)
}

func depthNote(e *env, r *rules.Rule) string {
	st, err := e.q.Stats(context.Background(), r.Name)
	return fmt.Sprintf("stream %s holds %d messages (err %v)", e.q.StreamName(r.Name), st.Msgs, err)
}

// redisProcessID is the pid of rdb's redis-server (INFO server), for /proc.
func redisProcessID(t *testing.T, rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	t.Fatal("no process_id in INFO server")
	return 0
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// peerSelected reports whether system name runs: every one, unless SLUICE_BENCH_ONLY lists
// some (comma-separated names: hand, own, own2, claim, asynq, bullmq).
func peerSelected(name string) bool {
	only := strings.TrimSpace(os.Getenv("SLUICE_BENCH_ONLY"))
	return only == "" || slices.Contains(strings.Split(strings.ReplaceAll(only, " ", ""), ","), name)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
