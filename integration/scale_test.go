package integration_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// TestScaleReport is the scale study: SLUICE_SCALE_KEYS (default 1,000,000) keys each
// holding one message — in a nats-server process of its own, with Redis holding what
// admission leaves per key (the depth counter and the due mark) — and then how fast
// drainers' claims go through that many due keys. It reports nats-server RSS per key,
// Redis bytes per key and claims per second. Run with SLUICE_BENCH=1 (make bench).
func TestScaleReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	keys := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_SCALE_KEYS")); err == nil && v > 0 {
		keys = v
	}
	dir := t.TempDir()
	if err := proctest.BuildNATSServer(dir); err != nil {
		t.Fatal(err)
	}
	port, mport := freeTCPPort(t), freeTCPPort(t)
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-m", strconv.Itoa(mport), "-js", "-sd", filepath.Join(t.TempDir(), "js")}
	// SLUICE_SCALE_PROFILE=<file> writes nats-server's heap profile after the load there
	// (go tool pprof <file>), to see what its memory per key is made of.
	profile := os.Getenv("SLUICE_SCALE_PROFILE")
	pport := 0
	if profile != "" {
		pport = freeTCPPort(t)
		args = append(args, "-profile", strconv.Itoa(pport))
	}
	ns := proctest.Start(t, proctest.Spec{Name: "nats-scale", Bin: filepath.Join(dir, "nats-server"),
		Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadyURL: fmt.Sprintf("http://127.0.0.1:%d/healthz", mport), Args: args})
	r := redistest.Start(t, redistest.Options{})
	rdb := r.Client(t)
	ctx := context.Background()

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx, "scale", 10); err != nil {
		t.Fatal(err)
	}
	sched, err := queue.NewScheduler(rdb, queue.SchedulerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range queue.Scripts() { // the pipelines below use EVALSHA
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // let the fresh server's RSS settle
	rss0 := ns.RSS()
	mem0 := usedMemoryOf(t, rdb)

	// One message per key, published asynchronously (the PubAcks are waited for per batch),
	// counted and marked due in Redis per batch of 1000 as admission's batches do.
	start := time.Now()
	now := time.Now()
	const batch = 1000
	ks := make([]string, 0, batch)
	adm := make([]queue.CountRequest, 0, batch)
	counted := make([]queue.CountResult, batch)
	pipeline := &queue.AdmitPipeline{RDB: rdb, Scheduler: sched, MaxBatch: batch}
	for i := 0; i < keys; i++ {
		key := "user-" + strconv.Itoa(i)
		id, _ := queue.NewID("scale", key)
		m := queue.Message{ID: id, Rule: "scale", Key: key, Payload: []byte(`{"n":1}`), CreatedAt: now}
		if _, err := js.PublishMsgAsync(queue.EncodeMessage(q.Subject("scale", key), m)); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, key)
		adm = append(adm, queue.CountRequest{Rule: "scale", Key: key, Capacity: 10, Now: now, Stored: true})
		if len(ks) == batch || i == keys-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				t.Fatal("PubAcks did not come")
			}
			// Counted and marked due in one script call per partition, as a batch
			// submission's are (CountBatch with Stored).
			pipeline.CountBatch(adm, counted[:len(adm)])
			for _, c := range counted[:len(adm)] {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
			}
			ks, adm = ks[:0], adm[:0]
		}
	}
	loaded := time.Since(start)
	st, err := q.Stats(ctx, "scale")
	if err != nil || st.Msgs != uint64(keys) {
		t.Fatalf("stream holds %+v (%v), want %d messages", st, err, keys)
	}
	time.Sleep(time.Second) // let the RSS settle, as before the load
	rss1 := ns.RSS()
	mem1 := usedMemoryOf(t, rdb)
	natsPerKey := float64(rss1-rss0) / float64(keys)
	redisPerKey := float64(mem1-mem0) / float64(keys)
	t.Logf("%d keys holding one message each, loaded in %v (%.0f/s)", keys, loaded.Round(time.Millisecond), float64(keys)/loaded.Seconds())
	t.Logf("  nats-server RSS right after the load: %+.0f MB, %.0f B per key (with the duplicate window's ids and the heap's room to grow)", float64(rss1-rss0)/1e6, natsPerKey)
	t.Logf("  Redis used_memory: %+.0f MB, %.0f B per key (goal ≤ 150): the due mark and the depth counter (in its bucket)", float64(mem1-mem0)/1e6, redisPerKey)
	report(t, "scale-nats-rss-bytes-per-key", fmt.Sprintf("%.0f", natsPerKey))
	if profile != "" {
		saveHeapProfile(t, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", pport), profile)
	}
	// Right after the load nats-server also holds every message id for the duplicate window
	// and its recently written blocks in cache, and the Go heap has room to grow into: what
	// stays is measured once the window has passed and the runtime has collected since (it
	// collects at least every two minutes, and returns freed memory to the OS as it goes).
	if os.Getenv("SLUICE_SCALE_SETTLE") != "0" {
		time.Sleep(queue.DefaultDuplicates + 15*time.Second)
		rss2 := ns.RSS()
		t.Logf("  nats-server RSS after the %v duplicate window: %+.0f MB, %.0f B per key", queue.DefaultDuplicates, float64(rss2-rss0)/1e6, float64(rss2-rss0)/float64(keys))
		report(t, "scale-nats-rss-bytes-per-key-window", fmt.Sprintf("%.0f", float64(rss2-rss0)/float64(keys)))
		time.Sleep(2*time.Minute + 15*time.Second)
		rss3 := ns.RSS()
		t.Logf("  nats-server RSS once the runtime collected after the window (steady state): %+.0f MB, %.0f B per key (goal ≤ 200)", float64(rss3-rss0)/1e6, float64(rss3-rss0)/float64(keys))
		report(t, "scale-nats-rss-bytes-per-key-settled", fmt.Sprintf("%.0f", float64(rss3-rss0)/float64(keys)))
		if profile != "" {
			saveHeapProfile(t, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", pport), profile+".settled")
		}
	}
	report(t, "scale-redis-bytes-per-key", fmt.Sprintf("%.0f", redisPerKey))

	// Claims through that many due keys: one drainer's claim loop, 256 keys a call, each
	// released again (its message stays) with the next claim, as a drainer does.
	var claimed int
	var rel []queue.Release
	cstart := time.Now()
	for time.Since(cstart) < 5*time.Second {
		cl, err := sched.Claims.Claim(ctx, "scale", time.Now(), queue.ClaimRequest{Owner: "scale-drainer", Max: 256, Lease: time.Minute,
			Outflow: queue.Outflow{Every: time.Hour}, Releases: rel})
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Claims) == 0 {
			break
		}
		claimed += len(cl.Claims)
		rel = rel[:0]
		for _, c := range cl.Claims {
			rel = append(rel, queue.Release{Key: c.Key, Mode: queue.Released})
		}
	}
	rate := float64(claimed) / time.Since(cstart).Seconds()
	t.Logf("  claims with %d due keys: %.0f keys/s (256 a call, released with the next call)", keys, rate)
	report(t, "scale-claims-per-second", fmt.Sprintf("%.0f", rate))
}

func saveHeapProfile(t *testing.T, url, file string) {
	t.Helper()
	if err := saveProfile(url, file); err != nil {
		t.Fatalf("heap profile: %v", err)
	}
	t.Logf("  nats-server heap profile written to %s", file)
}

func usedMemoryOf(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoInt(info, "used_memory")
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
