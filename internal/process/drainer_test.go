package process_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	m := newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(k string) string {
		return map[string]string{"SLUICE_RULES": "a.yaml,b", "SLUICE_WORKERS": "7"}[k]
	}
	if err := m.ParseFlags([]string{"-http", ":0", "-shutdown-timeout", "5s"}); err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if len(c.Rules) != 2 || c.Workers != 7 || c.HTTPAddr != ":0" || c.ShutdownTimeout != 5*time.Second || c.NATSURL == "" {
		t.Fatalf("config %+v", c)
	}
	if c.Lease != 2500*time.Millisecond || c.LeaseRenew != 0 {
		t.Fatalf("lease defaults: %v, %v (0 = Lease/3)", c.Lease, c.LeaseRenew)
	}
	m = newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(string) string { return "" }
	if err := m.ParseFlags(nil); err == nil {
		t.Fatal("no -rules accepted")
	}
	if err := m.ParseFlags([]string{"-rules", "x", "-workers", "0"}); err == nil {
		t.Fatal("-workers 0 accepted")
	}
	// -redis is checked with the flags: a typo fails at start, naming the flag.
	if err := m.ParseFlags([]string{"-rules", "x", "-redis", "redis://h:6379?dial_timout=1s"}); err == nil || !strings.Contains(err.Error(), "-redis") || !strings.Contains(err.Error(), "dial_timout") {
		t.Fatalf("bad -redis: %v", err)
	}
	m.Getenv = func(k string) string {
		return map[string]string{"SLUICE_REDIS_URL": "redis+sentinel://s1:26379?master_name=m&addr=s2:26379"}[k]
	}
	if err := m.ParseFlags([]string{"-rules", "x"}); err != nil || m.Config.RedisURL != "redis+sentinel://s1:26379?master_name=m&addr=s2:26379" {
		t.Fatalf("Sentinel URL from SLUICE_REDIS_URL: %q, %v", m.Config.RedisURL, err)
	}
	m = newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(k string) string {
		return map[string]string{"SLUICE_RULES": "x", "SLUICE_LEASE": "4s", "SLUICE_LEASE_RENEW": "1s"}[k]
	}
	if err := m.ParseFlags(nil); err != nil || m.Config.Lease != 4*time.Second || m.Config.LeaseRenew != time.Second {
		t.Fatalf("SLUICE_LEASE, SLUICE_LEASE_RENEW: %+v, %v", m.Config, err)
	}
	m = newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(k string) string {
		return map[string]string{"SLUICE_RULES": "x", "SLUICE_ENGINE": "own", "SLUICE_OWN_PARTITIONS": "32"}[k]
	}
	if err := m.ParseFlags([]string{"-own-lease", "2s"}); err != nil || m.Config.Engine != "own" || m.Config.OwnPartitions != 32 || m.Config.OwnLease != 2*time.Second || m.Config.RepairEvery != 30*time.Second {
		t.Fatalf("SLUICE_ENGINE, SLUICE_OWN_PARTITIONS, -own-lease: %+v, %v", m.Config, err)
	}
	for _, bad := range [][]string{{"-engine", "fast"}, {"-own-partitions", "0"}, {"-own-partitions", "257"}, {"-own-lease", "100ms"}, {"-repair-every", "0s"}} {
		m = newDrainer()
		m.Stderr = io.Discard
		m.Getenv = func(string) string { return "" }
		if err := m.ParseFlags(append([]string{"-rules", "x"}, bad...)); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want an error naming the flag", bad, err)
		}
	}
	for _, bad := range [][]string{{"-lease", "100ms"}, {"-lease", "3s", "-lease-renew", "2s"}, {"-lease-renew", "-1s"}} {
		m = newDrainer()
		m.Stderr = io.Discard
		m.Getenv = func(string) string { return "" }
		if err := m.ParseFlags(append([]string{"-rules", "x"}, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestDrainerProcess runs the whole process in-process against embedded NATS and a private
// Redis: a message admitted the way the ingress does it reaches an HTTP sink with the
// contract's headers, and the process serves its health and metrics endpoints.
func TestDrainerProcess(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"claim", "own"} {
		t.Run(engine, func(t *testing.T) { t.Parallel(); testDrainerProcess(t, engine) })
	}
}

func testDrainerProcess(t *testing.T, engine string) {
	got := make(chan *http.Request, 10)
	bodies := make(chan string, 10)
	sinkSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- string(b)
	}))
	defer sinkSrv.Close()

	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "orders.yaml")
	yaml := fmt.Sprintf(`domain: orders
descriptors:
  - key: merchant_id
    name: orders-per-merchant
    queue:
      capacity: 10
      outflow: {unit: second, requests_per_unit: 100}
    sink: {url: %q, timeout: 2s}
`, sinkSrv.URL)
	if err := os.WriteFile(rulesFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	node := natstest.Start(t)
	rs := redistest.Shared(t)

	m := newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(string) string { return "" }
	m.Logger = slog.New(slog.DiscardHandler)
	if err := m.ParseFlags([]string{"-rules", rulesFile, "-http", "127.0.0.1:0", "-nats", node.URL(), "-redis", rs.URL(), "-workers", "4", "-engine", engine}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	// Admit one message as the ingress does: ensure the stream, publish, mark due.
	_, js := natstest.Connect(t, node.URL())
	q, _ := queue.NewQueues(js, queue.Config{})
	if err := q.Ensure(ctx, "orders-per-merchant", 10); err != nil {
		t.Fatal(err)
	}
	client := rs.Client(t)
	s, _ := queue.NewScheduler(client, queue.SchedulerConfig{})
	msg := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Key: "m 42/🦀", Payload: []byte(`{"order_id": 991}`), CreatedAt: time.Now()}
	if _, err := q.Enqueue(ctx, "orders-per-merchant", msg); err != nil {
		t.Fatal(err)
	}
	if err := s.Claims.MarkDue(ctx, "orders-per-merchant", msg.Key); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.Header.Get("Idempotency-Key") != msg.ID || !strings.Contains(r.Header.Get("Sluice-Key"), "m%2042") || r.Header.Get("Sluice-Fence") == "" {
			t.Errorf("sink headers: %v", r.Header)
		}
		if b := <-bodies; b != `{"order_id": 991}` {
			t.Errorf("payload %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}

	base := "http://" + m.Addr.String()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	var metrics []byte
	if !waittest.Within(10*time.Second, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(metrics), `sluice_deliveries_total{outcome="delivered",rule="orders-per-merchant"} 1`)
	}) {
		t.Fatalf("metrics lack the delivery:\n%s", metrics)
	}
	m.Close()
	m.Close()
}

// drainerUnderTest keeps the shape these tests had when the drainer's Main lived in
// cmd/drainer: Getenv and Stderr beside the process, ParseFlags filling its Config.
type drainerUnderTest struct {
	*process.Drainer
	Getenv func(string) string
	Stderr io.Writer
}

func newDrainer() *drainerUnderTest { return &drainerUnderTest{Drainer: &process.Drainer{}} }

func (m *drainerUnderTest) ParseFlags(args []string) error {
	c, err := process.ParseDrainerFlags(args, m.Getenv, m.Stderr)
	m.Config = c
	return err
}
