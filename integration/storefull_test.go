package integration_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
)

const storeFullRules = `
domain: shop
descriptors:
  - key: merchant
    name: faults
    queue: {capacity: 100000, outflow: {unit: second, requests_per_unit: 500}}
    # The sink refuses for as long as the store takes to fill (longer on a slow machine or
    # under -race): no message may run out of attempts meanwhile, or it would be dead, not delivered.
    delivery: {max_attempts: 1000, min_backoff: 100ms, max_backoff: 1s}
    sink: {url: "SINK"}
`

// faultStoreFull fills the queue store: a NATS server (R1; see docs/operations.md for R3, where a
// full store leaves the stream without a leader) whose JetStream store holds 48 MiB, the
// queue streams without a limit of their own (-queue-max-bytes 0), a sink that refuses
// everything, and a flood of 4 kB orders. Once the store is full every submit is answered
// 503 #store-full at once (not after a timeout), /readyz stays 200 and says why,
// sluice_queue_store_full is 1; when the sink is back the backlog drains, submits are
// accepted again without restarting anything, and every acknowledged order is delivered.
func faultStoreFull(t *testing.T, p faultParams) faultRow {
	c := startCluster(t, clusterOptions{rules: storeFullRules, ingresses: 1, drainers: 1, natsSingle: true, natsMaxStore: 48 << 20,
		procEnv: []string{"SLUICE_QUEUE_MAX_BYTES=0", "SLUICE_RETRY_MAX_BYTES=2MiB", "SLUICE_DEAD_MAX_BYTES=2MiB"}})
	c.sink.Answer(func(sinktest.Delivery) (int, string) { return 503, "1" })
	payload := `"` + strings.Repeat("x", 4000) + `"`

	var mu sync.Mutex
	var acked []string
	var full, fullSlow, other atomic.Int64
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				start := time.Now()
				r := c.submit(0, "shop", []kv{{"merchant", fmt.Sprint("m-", n%100)}}, payload, "")
				took := time.Since(start)
				switch {
				case r.Code == 202:
					mu.Lock()
					acked = append(acked, r.str("id"))
					mu.Unlock()
				case r.Code == 503 && strings.HasSuffix(r.str("type"), "#store-full"):
					full.Add(1)
					if took > time.Second {
						fullSlow.Add(1)
					}
					slowest.Store(max(slowest.Load(), int64(took)))
					if r.Header.Get("Retry-After") == "" {
						other.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
				default:
					other.Add(1)
					t.Logf("unexpected answer: %d %v %v", r.Code, r.Body, r.Err)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	if !waittest.Within(2*time.Minute, func() bool { return full.Load() >= 200 }) {
		close(stop)
		wg.Wait()
		t.Fatalf("the store never filled: %d accepted, %d store-full, %d other", len(acked), full.Load(), other.Load())
	}
	// While full: /readyz is 200 and says so; the gauge is 1.
	resp, err := c.http.Get(c.ingress[0].URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "store is full") {
		t.Errorf("/readyz with the store full: %d %q, want 200 saying the store is full", resp.StatusCode, body)
	}
	if m, err := c.ingress[0].Metrics(t.Context()); err != nil || m["sluice_queue_store_full"] != 1 {
		t.Errorf("sluice_queue_store_full = %v (%v) with the store full, want 1", m["sluice_queue_store_full"], err)
	}
	// The sink comes back: the backlog drains and submits are accepted again.
	back := time.Now()
	c.sink.Answer(nil)
	full.Store(0)
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	if !waittest.Within(2*time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > before+100 }) {
		t.Errorf("no submit accepted within 2 min of the sink's return (still %d store-full)", full.Load())
	}
	recovered := time.Since(back)
	close(stop)
	wg.Wait()
	if n := fullSlow.Load(); n > 0 {
		t.Errorf("%d store-full answers took more than 1 s (slowest %v): want them at once", n, time.Duration(slowest.Load()))
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d answers other than 202 or 503 #store-full with Retry-After", n)
	}
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	got := map[string]bool{}
	for _, d := range c.waitIDs(ids, p.verify) {
		got[d.ID] = true
	}
	v := verdict{Acked: len(ids), Delivered: len(got)}
	for _, id := range ids {
		if !got[id] {
			v.Lost++
			v.Missing = append(v.Missing, id)
		}
	}
	return faultRow{Fault: "NATS store full (one server, 48 MiB max_store, sink down)", V: v, Recovery: recovered,
		What: "from the sink's return to submits accepted again",
		Note: fmt.Sprintf("503 #store-full answered at once (slowest %v); /readyz 200 saying so; no restart", time.Duration(slowest.Load()).Round(time.Millisecond))}
}
