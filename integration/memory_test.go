package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// Redis holds per-key state only: after a flood has been delivered, what Redis keeps does
// not grow with the number of messages. A real ingress with an in-process drainer on a
// real nats-server and a private redis-server admits 30,000 messages over 1,000 keys into
// a NATS-subject sink; once every one is delivered and every queue is empty, Redis holds
// no more keys than before the flood and its keys hold at most 2 bytes more per delivered
// message (the sum of MEMORY USAGE over the keys, exact: no sampling), with the 1,000 keys
// already touched once, so per-key state is in both figures. Both leave out the per-rule
// rate buckets (deliveries and refusals counted per ten seconds, kept two minutes:
// bounded by time and rules, not traffic). INFO memory's dataset is reported too and bounded at 8 bytes per message: it moves with the
// allocator's noise (+49 to +99 KB run to run, 1.6–3.3 B per message, while the keys
// before and after were the same four, of the same sizes), where the smallest
// per-message record (a bare message id) would cost more than 40 B.
func TestRedisMemoryPerDeliveredMessage(t *testing.T) {
	const keys, perKey = 1000, 30
	total := keys * perKey
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	rdb := r.Client(t)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var delivered atomic.Int64
	sub, err := nc.Subscribe("flood.out", func(*nats.Msg) { delivered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	nc.Flush()

	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(`
domain: flood
descriptors:
  - key: user
    name: flood
    queue:
      capacity: 100
      outflow: {unit: second, requests_per_unit: 1000}
    sink: {nats_subject: flood.out}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-drain-workers", "64", "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	base := "http://" + m.Addr.String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

	flood := func(rounds int) {
		t.Helper()
		var wg sync.WaitGroup
		var failed atomic.Int64
		next := atomic.Int64{}
		for w := 0; w < 32; w++ {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(keys*rounds) {
						return
					}
					body := `{"domain":"flood","descriptor":[{"key":"user","value":"u-` + strconv.FormatInt(i%keys, 10) + `"}],"payload":{"n":` + strconv.FormatInt(i, 10) + `}}`
					for {
						resp, err := client.Post(base+"/v1/messages", "application/json", strings.NewReader(body))
						if err != nil {
							failed.Add(1)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusAccepted {
							break
						}
						if resp.StatusCode != http.StatusTooManyRequests { // a full queue waits; anything else is a failure
							failed.Add(1)
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d submissions failed", failed.Load())
		}
	}
	drained := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			depths, err := rdb.Keys(ctx, "sl:{flood}:depth*").Result() // the depth buckets: a hash that empties is gone
			if err != nil {
				t.Fatal(err)
			}
			due := rdb.ZCard(ctx, "sl:{flood}:due").Val() + rdb.ZCard(ctx, "sl:{flood}:lease").Val()
			st, err := m.Stack.Queues.Stats(ctx, "flood")
			if err != nil {
				t.Fatal(err)
			}
			if delivered.Load() >= want && st.Msgs == 0 && due == 0 && len(depths) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not drained: %d of %d delivered, %d queued, %d keys due or leased, %d depth buckets", delivered.Load(), want, st.Msgs, due, len(depths))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	memory := func() (dataset, used, dbsize, held int64) {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // let slots of emptied keys pass (the idle set forgets them)
		// The slow log keeps the arguments of up to 128 slow commands (big admission batches
		// can be slow on a busy machine): bounded, but noise at this scale.
		rdb.SlowLogReset(ctx)
		rdb.Do(ctx, "MEMORY", "PURGE")
		info := rdb.Info(ctx, "memory").Val()
		// Keys, less the per-rule rate buckets (deliveries counted per ten seconds, kept two
		// minutes: bounded by time and rules, whatever the traffic).
		var n int64
		for _, k := range rdb.Keys(ctx, "*").Val() {
			if !strings.Contains(k, "}:delivered:") && !strings.Contains(k, "}:refused:") {
				n++
				held += rdb.MemoryUsage(ctx, k, 0).Val()
			}
		}
		return infoInt(info, "used_memory_dataset"), infoInt(info, "used_memory"), n, held
	}

	// A first flood of the same size: every key has been used, and Redis has made the
	// one-off allocations of such a load (~50 KB here whatever the number of messages: the
	// same after 30k and 60k), before the measurement.
	const warm = perKey
	flood(warm)
	drained(int64(keys * warm))
	ds0, used0, keys0, held0 := memory()

	start := time.Now()
	flood(perKey)
	admitted := time.Since(start)
	drained(int64(keys*warm + total))
	ds1, used1, keys1, held1 := memory()

	perMsg := float64(ds1-ds0) / float64(total)
	heldPerMsg := float64(held1-held0) / float64(total)
	t.Logf("Redis after %d messages over %d keys (admitted in %v) were delivered: keys hold %+d B (%.3f B per message), INFO dataset %+d B (%.2f B per message), used_memory %+d B, keys %d → %d",
		total, keys, admitted.Round(time.Millisecond), held1-held0, heldPerMsg, ds1-ds0, perMsg, used1-used0, keys0, keys1)
	report(t, "redis-bytes-per-delivered-message", fmt.Sprintf("%.3f (keys) %.2f (INFO dataset)", heldPerMsg, perMsg))
	if heldPerMsg > 2 {
		t.Errorf("Redis's keys hold %.3f bytes more per delivered message, want at most 2", heldPerMsg)
	}
	if perMsg > 8 {
		t.Errorf("Redis's dataset grew %.2f bytes per delivered message, want at most 8 (allocator noise)", perMsg)
	}
	if keys1 > keys0 {
		t.Errorf("Redis holds %d keys after the flood, %d before: something of the messages stayed", keys1, keys0)
	}
}

func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// report logs a figure in the form make bench collects (grep '^ *BENCH').
func report(t *testing.T, name, value string) { t.Logf("BENCH %s %s", name, value) }
