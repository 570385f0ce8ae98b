package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// The use cases of issue #5 as tests, time-compressed: the whole system (ingress with an
// in-process drainer and re-admitter) against a real NATS server, a real Redis and a
// recording HTTP sink.

type system struct {
	t    *testing.T
	base string
	sink *sinktest.Sink
}

// scenariosToken is the admin token of the system startSystem runs (at least 16 characters,
// as outside sluice dev).
const scenariosToken = "scenarios-token-0123"

func startSystem(t *testing.T, rulesYAML string) *system {
	t.Helper()
	sink := sinktest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(rulesYAML, "SINK", sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-status-keep", "1h", "-readmit-max-backoff", "2s", "-shutdown-timeout", "2s", "-admin-token", scenariosToken}, func(string) string { return "" }, io.Discard)
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
	return &system{t: t, base: "http://" + m.Addr.String(), sink: sink}
}

type answer struct {
	Code int
	Body map[string]any
}

func (s *system) submit(domain string, descriptor [][2]string, payload string) answer {
	s.t.Helper()
	var d []string
	for _, kv := range descriptor {
		d = append(d, fmt.Sprintf(`{"key":%q,"value":%q}`, kv[0], kv[1]))
	}
	return s.postJSON(fmt.Sprintf(`{"domain":%q,"descriptor":[%s],"payload":%s}`, domain, strings.Join(d, ","), payload))
}

func (s *system) get(path string, admin bool) answer {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.base+path, nil)
	if admin {
		req.Header.Set("Authorization", "Bearer "+scenariosToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	a.Code = resp.StatusCode
	json.NewDecoder(resp.Body).Decode(&a.Body)
	return a
}

// postJSON posts a raw submission body (or batch) to POST /v1/messages.
func (s *system) postJSON(body string) answer {
	s.t.Helper()
	resp, err := http.Post(s.base+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	a.Code = resp.StatusCode
	json.NewDecoder(resp.Body).Decode(&a.Body)
	return a
}

// patchQueue PATCHes a queue's live override with the admin token and requires a 200.
func (s *system) patchQueue(name, body string) {
	s.t.Helper()
	req, _ := http.NewRequest("PATCH", s.base+"/v1/admin/queues/"+name, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+scenariosToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("PATCH %s %s: %v", name, body, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("PATCH %s %s: %d", name, body, resp.StatusCode)
	}
}

// waitState polls a message's status until it reaches state or the timeout passes.
func (s *system) waitState(id, state string, timeout time.Duration) answer {
	s.t.Helper()
	var a answer
	waittest.Within(timeout, func() bool { a = s.get("/v1/messages/"+id, false); return a.Body["state"] == state })
	return a
}

func TestOrdersBurstBeyondCapacityAllDeliveredOnceAtTheOutflow(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 20}}
    overflow: park
    park: {max_age: 2m}
    sink: {url: "SINK/orders"}
`)
	var ids []string
	parked := 0
	for i := 0; i < 100; i++ {
		a := s.submit("orders", [][2]string{{"merchant_id", "m-42"}}, fmt.Sprintf(`{"order":%d}`, i))
		if a.Code != 202 {
			t.Fatalf("order %d refused: %d %v", i, a.Code, a.Body)
		}
		if a.Body["state"] == "parked" {
			parked++
		}
		ids = append(ids, a.Body["id"].(string))
	}
	if parked == 0 {
		t.Fatal("a burst of 100 into a queue of 10 parked nothing")
	}
	acc := s.sink.WaitAccepted(100, 90*time.Second)
	rep := sinktest.Check(acc, map[string][]string{})
	if rep.Unique != 100 || rep.Duplicates != 0 {
		t.Fatalf("delivered %d distinct of 100, %d duplicates", rep.Unique, rep.Duplicates)
	}
	got := map[string]bool{}
	for _, d := range acc {
		got[d.ID] = true
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("message %s never delivered", id)
		}
	}
	// Never faster than the outflow: at 20/s, deliveries of the key leave 50 ms apart. They
	// are timed here on arrival, which a loaded machine delays by up to tens of
	// milliseconds, so each gap may lose up to 40 ms of jitter, and ten deliveries must
	// span at least 9 × 50 ms less that jitter.
	const jitter = 40 * time.Millisecond
	for i := 1; i < len(acc); i++ {
		if gap := acc[i].At.Sub(acc[i-1].At); gap < 50*time.Millisecond-jitter {
			t.Fatalf("deliveries %d and %d only %v apart at 20/s", i-1, i, gap)
		}
		if i >= 9 {
			if span := acc[i].At.Sub(acc[i-9].At); span < 9*50*time.Millisecond-jitter {
				t.Fatalf("deliveries %d..%d span %v, faster than 20/s", i-9, i, span)
			}
		}
	}
	t.Logf("100 orders, %d parked at first, delivered in %v", parked, acc[99].At.Sub(acc[0].At).Round(time.Millisecond))
	if st := s.waitState(ids[99], "delivered", 5*time.Second); st.Body["state"] != "delivered" {
		t.Fatalf("status of the last order: %v", st.Body)
	}
}

func TestMarketingFivePerWindowTheRestWaitForTheNext(t *testing.T) {
	t.Parallel()
	const window = 4 * time.Second
	s := startSystem(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: user_id
        name: marketing
        rate_limit: {interval: 4s, requests_per_unit: 5, algorithm: fixed_window}
        overflow: park
        queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 50}}
        sink: {url: "SINK/marketing"}
`)
	// Start just after a window boundary so all 8 are submitted inside one window.
	time.Sleep(time.Until(time.Now().Truncate(window).Add(window + 50*time.Millisecond)))
	windowEnd := time.Now().Truncate(window).Add(window)
	user := [][2]string{{"message_type", "marketing"}, {"user_id", "u-1"}}
	states := map[string]int{}
	for i := 0; i < 8; i++ {
		a := s.submit("messaging", user, fmt.Sprintf(`"msg %d"`, i))
		if a.Code != 202 {
			t.Fatalf("message %d: %d %v", i, a.Code, a.Body)
		}
		states[a.Body["state"].(string)]++
		if a.Body["state"] == "parked" {
			at, _ := time.Parse(time.RFC3339, a.Body["retry_at"].(string))
			if at.Before(windowEnd) {
				t.Fatalf("parked until %v, but the window only frees at %v", at, windowEnd)
			}
		}
	}
	if states["queued"] != 5 || states["parked"] != 3 {
		t.Fatalf("states %v, want 5 queued and 3 parked", states)
	}
	acc := s.sink.WaitAccepted(8, 3*window+10*time.Second)
	if len(acc) != 8 {
		t.Fatalf("%d of 8 delivered", len(acc))
	}
	for i, d := range acc {
		if i < 5 && !d.At.Before(windowEnd) {
			t.Fatalf("delivery %d at %v, after the first window (ends %v)", i, d.At, windowEnd)
		}
		if i >= 5 && d.At.Before(windowEnd) {
			t.Fatalf("parked message delivered at %v, before its window (%v)", d.At, windowEnd)
		}
	}
}

func TestSinkDownThenBackEverythingDelivered(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 50}}
    delivery: {max_attempts: 20, min_backoff: 100ms, max_backoff: 500ms}
    sink: {url: "SINK/orders"}
`)
	var mu sync.Mutex
	down := true
	s.sink.Answer(func(sinktest.Delivery) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return 503, ""
		}
		return 200, ""
	})
	order := map[string][]string{}
	for i := 0; i < 10; i++ {
		key := fmt.Sprintf("m-%d", i%2)
		a := s.submit("orders", [][2]string{{"merchant_id", key}}, fmt.Sprintf(`%d`, i))
		if a.Code != 202 {
			t.Fatalf("submit: %d", a.Code)
		}
		order[key] = append(order[key], a.Body["id"].(string))
	}
	first := order["m-0"][0]
	if st := s.waitState(first, "retrying", 10*time.Second); st.Body["state"] != "retrying" || st.Body["last_error"] == "" {
		t.Fatalf("while the sink is down: %v", st.Body)
	}
	time.Sleep(time.Second) // the scenario: the sink stays down another second
	mu.Lock()
	down = false
	mu.Unlock()
	acc := s.sink.WaitAccepted(10, 30*time.Second)
	rep := sinktest.Check(acc, order)
	if rep.Unique != 10 || len(rep.Missing) != 0 || rep.Reordered != 0 || rep.Duplicates != 0 {
		t.Fatalf("after recovery: %+v", rep)
	}
	st := s.waitState(first, "delivered", 5*time.Second)
	if st.Body["state"] != "delivered" || st.Body["attempts"].(float64) < 2 {
		t.Fatalf("status after recovery: %v", st.Body)
	}
}

func TestSinkRefusesWith400DeadAtOnce(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 50}}
    sink: {url: "SINK/orders"}
`)
	s.sink.Answer(func(sinktest.Delivery) (int, string) { return 400, "" })
	a := s.submit("orders", [][2]string{{"merchant_id", "m-1"}}, `{"bad":true}`)
	id := a.Body["id"].(string)
	st := s.waitState(id, "dead", 10*time.Second)
	if st.Body["state"] != "dead" || st.Body["attempts"] != float64(1) || !strings.Contains(fmt.Sprint(st.Body["last_error"]), "400") {
		t.Fatalf("status: %v", st.Body)
	}
	if n := len(s.sink.All()); n != 1 {
		t.Fatalf("a 400 was tried %d times", n)
	}
	dead := s.get("/v1/admin/dead?queue=orders", true)
	msgs, _ := dead.Body["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["id"] != id || !strings.Contains(fmt.Sprint(msgs[0].(map[string]any)["reason"]), "400") {
		t.Fatalf("dead letters: %v", dead.Body)
	}
}

// Every metric name of docs/metrics.md is exposed by a process that admits and drains.
func TestMetricsExposeEveryNameOfTheContract(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 50}}
    sink: {url: "SINK/orders"}
`)
	a := s.submit("orders", [][2]string{{"merchant_id", "m-1"}}, `1`)
	if st := s.waitState(a.Body["id"].(string), "delivered", 10*time.Second); st.Body["state"] != "delivered" {
		t.Fatalf("not delivered: %v", st.Body)
	}
	want := []string{
		`sluice_admissions_total{decision="queued",rule="orders"}`,
		`sluice_deliveries_total{outcome="delivered",rule="orders"}`,
		`sluice_queue_depth{rule="orders"}`,
		`sluice_parked{rule="orders"}`,
		`sluice_dead{rule="orders"}`,
		`sluice_outflow_rate{rule="orders"} 50`,
		`sluice_dispatch_lag_seconds_bucket{rule="orders",le=`,
		`sluice_http_request_duration_seconds_bucket{code="202",route="/v1/messages",le=`,
		"go_goroutines", "process_resident_memory_bytes",
	}
	var missing []string
	if !waittest.Within(15*time.Second, func() bool { // gauges are sampled every few seconds
		resp, err := http.Get(s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing = nil
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}) {
		t.Fatalf("/metrics lacks %v", missing)
	}
}
