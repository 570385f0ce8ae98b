package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// A flood of one rule fills only that rule's queue (queue.max_bytes): its submits are
// answered 429 naming the rule, across all its keys, while another rule keeps admitting.
func TestOneRulesFloodLeavesOtherRulesAdmitting(t *testing.T) {
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(`
domain: shop
descriptors:
  - key: flood
    name: flood
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1}, max_bytes: 1MiB}
    sink: {url: "http://127.0.0.1:1/unused"}
  - key: calm
    name: calm
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL()},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	payload := `"` + strings.Repeat("x", 10_000) + `"`
	submit := func(rule string, key int) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json",
			strings.NewReader(`{"domain":"shop","descriptor":[{"key":"`+rule+`","value":"k-`+strconv.Itoa(key)+`"}],"payload":`+payload+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	accepted := 0
	var code int
	var body map[string]any
	for i := range 300 {
		if code, body = submit("flood", i); code != http.StatusAccepted {
			break
		}
		accepted++
	}
	if code != http.StatusTooManyRequests || accepted < 90 || accepted > 105 {
		t.Fatalf("after %d messages of 10 kB into a 1 MiB rule: %d %v, want 429", accepted, code, body)
	}
	if d, _ := body["detail"].(string); !strings.Contains(d, "max_bytes") {
		t.Errorf("detail %q does not say the rule's max_bytes is reached", d)
	}
	if v, _ := body["violated-policies"].([]any); len(v) != 1 || v[0] != "flood" {
		t.Errorf("violated-policies %v, want [flood]", body["violated-policies"])
	}
	if code, body := submit("flood", 100_000); code != http.StatusTooManyRequests {
		t.Errorf("a fresh key of the full rule: %d %v", code, body)
	}
	for i := range 20 {
		if code, body := submit("calm", i); code != http.StatusAccepted {
			t.Fatalf("the other rule while one is full: %d %v", code, body)
		}
	}
}
