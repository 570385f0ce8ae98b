package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// The 202's eta is when the message leaves, also when it is submitted while the key's head
// is at the sink: a key at 2/s whose sink takes 300 ms per call gets a message, then a
// second and third while the first is being delivered, then a fourth after a pause; each
// is delivered within 60 ms after its eta, never before it. The claim engine: its eta is
// the key's next slot in Redis (the own engine's is an estimate asked for, TestPreferDepth).
func TestETAWhileTheHeadIsBeingDelivered(t *testing.T) {
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	var mu sync.Mutex
	got := map[string]time.Time{}
	entered := make(chan struct{}, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got[req.Header.Get("Sluice-Message-Id")] = time.Now()
		mu.Unlock()
		entered <- struct{}{}
		time.Sleep(300 * time.Millisecond) // the scenario: a sink that takes 300 ms
	}))
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 2}}
    sink: {url: "`+sink.URL+`"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(), "-drain", "-engine", "claim"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	etas := map[string]time.Time{}
	var order []string
	submit := func() {
		t.Helper()
		resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json",
			strings.NewReader(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ ID, ETA string }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submit: %d %v", resp.StatusCode, err)
		}
		eta, err := time.Parse(time.RFC3339Nano, body.ETA)
		if err != nil {
			t.Fatal(err)
		}
		etas[body.ID] = eta
		order = append(order, body.ID)
	}
	submit()
	<-entered // the head is at the sink
	submit()
	submit()
	<-entered
	<-entered
	time.Sleep(700 * time.Millisecond) // the key has emptied; its next slot has passed
	submit()
	<-entered
	time.Sleep(350 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i, id := range order {
		at, ok := got[id]
		if !ok {
			t.Fatalf("message %d (%s) not delivered", i+1, id)
		}
		if early := etas[id].Sub(at); early > 5*time.Millisecond || at.Sub(etas[id]) > 60*time.Millisecond {
			t.Errorf("message %d: eta %s, delivered %s (%+v after the eta)", i+1, etas[id].Format("15:04:05.000"), at.Format("15:04:05.000"), at.Sub(etas[id]))
		}
	}
}
