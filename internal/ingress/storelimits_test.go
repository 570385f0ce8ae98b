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

	"github.com/redis/go-redis/v9"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
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

// An item of a batch that its stream refuses (the rule's max_bytes reached) is answered 429
// on its own and its count is taken back: the key's depth in Redis ends at the messages
// stored, not at the items sent.
// (The claim engine: only its admissions count depth in Redis.)
func TestBatchItemNotStoredIsCountedOut(t *testing.T) {
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(`
domain: shop
descriptors:
  - key: flood
    name: flood
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1}, max_bytes: 1MiB}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(), "-max-body", "4194304", "-engine", "claim"},
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
	item := `{"domain":"shop","descriptor":[{"key":"flood","value":"k-1"}],"payload":"` + strings.Repeat("x", 10_000) + `"}`
	resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json", strings.NewReader("["+strings.TrimSuffix(strings.Repeat(item+",", 150), ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Accepted, Refused int
		Items             []map[string]any
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %d %v", resp.StatusCode, err)
	}
	stored := answer.Accepted
	if stored < 90 || stored > 105 || answer.Refused != 150-stored {
		t.Fatalf("150 items of 10 kB into a 1 MiB rule: %d accepted, %d refused", stored, answer.Refused)
	}
	for i, it := range answer.Items {
		if want := i < stored; want != (it["status"] == float64(202)) || (!want && it["status"] != float64(429)) {
			t.Fatalf("item %d: %v; the first %d stored, the rest 429", i, it, stored)
		}
	}
	if last := answer.Items[stored-1]; last["depth"] != float64(stored) {
		t.Errorf("the last item stored answers depth %v, want %d", last["depth"], stored)
	}
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()
	sched, err := queue.NewScheduler(rdb, queue.SchedulerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var depth int64
	if !waittest.Within(5*time.Second, func() bool {
		keys, _, err := sched.Depths.HotKeys(ctx, "flood", 1)
		if err == nil && len(keys) == 1 {
			depth = keys[0].Depth
		}
		return depth == int64(stored)
	}) {
		t.Fatalf("the key's depth count is %d, want the %d messages stored", depth, stored)
	}
}
