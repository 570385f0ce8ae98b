package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// TestScheduleLatenessReport schedules 10,000 messages over 1,000 keys for the same
// instant (in batches of 500) and measures when each reaches a NATS-subject sink: never
// before its time, and how late — raw, and beyond what the key's outflow imposes (the i-th
// message of a key cannot leave before deliver_at + i/outflow). Run with SLUICE_BENCH=1.
func TestScheduleLatenessReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	const keys, per = 1000, 10
	const rate = 10 // per key per second
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	arrivals := map[string][]time.Time{}
	sub, err := nc.Subscribe("sched.out", func(m *nats.Msg) {
		at := time.Now()
		mu.Lock()
		k := m.Header.Get("Sluice-Key")
		arrivals[k] = append(arrivals[k], at)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`
domain: sched
descriptors:
  - key: user
    name: sched
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: %d}}
    sink: {nats_subject: sched.out}
`, rate)), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-drain-workers", "256", "-max-body", "8388608"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	at := time.Now().Add(8 * time.Second).Truncate(time.Second)
	var items []string
	for i := 0; i < keys*per; i++ {
		items = append(items, fmt.Sprintf(`{"domain":"sched","descriptor":[{"key":"user","value":"u-%d"}],"payload":%d,"deliver_at":%q}`,
			i%keys, i, at.Format(time.RFC3339Nano)))
	}
	for b := 0; b < len(items); b += 500 {
		resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json", strings.NewReader("["+strings.Join(items[b:b+500], ",")+"]"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"refused":0`) {
			t.Fatalf("batch %d: %d %.300s", b/500, resp.StatusCode, body)
		}
	}
	submitted := time.Now()
	if !submitted.Before(at) {
		t.Fatalf("submitting took until %v, after the scheduled time %v", submitted, at)
	}
	deadline := at.Add(60 * time.Second)
	for {
		mu.Lock()
		got := 0
		for _, a := range arrivals {
			got += len(a)
		}
		mu.Unlock()
		if got >= keys*per || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var raw, beyond []time.Duration
	early := 0
	mu.Lock()
	for _, a := range arrivals {
		slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
		for i, t := range a {
			raw = append(raw, t.Sub(at))
			beyond = append(beyond, t.Sub(at.Add(time.Duration(i)*time.Second/rate)))
			if t.Before(at) {
				early++
			}
		}
	}
	mu.Unlock()
	if len(raw) < keys*per {
		t.Fatalf("%d of %d delivered within a minute of their time", len(raw), keys*per)
	}
	slices.Sort(raw)
	slices.Sort(beyond)
	q := func(v []time.Duration, p float64) time.Duration {
		return v[int(float64(len(v)-1)*p)].Round(time.Millisecond)
	}
	t.Logf("%d messages over %d keys scheduled for one instant (outflow %d/s per key): delivered %d early", keys*per, keys, rate, early)
	t.Logf("  lateness after deliver_at: p50 %v, p99 %v, max %v", q(raw, 0.5), q(raw, 0.99), q(raw, 1))
	t.Logf("  beyond what the outflow imposes: p50 %v, p99 %v, max %v (goal p99 ≤ 1 s)", q(beyond, 0.5), q(beyond, 0.99), q(beyond, 1))
	report(t, "schedule-lateness-beyond-outflow-p99-ms", fmt.Sprint(q(beyond, 0.99).Milliseconds()))
	if early > 0 {
		t.Errorf("%d messages delivered before their deliver_at", early)
	}
}
