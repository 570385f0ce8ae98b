package devenv_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/devenv"
)

// deliver posts one delivery to the sink as a drainer does and returns the status and
// Retry-After.
func deliver(t *testing.T, s *devenv.Sink, path, rule, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL()+path, strings.NewReader(`{}`))
	req.Header.Set("Sluice-Rule", rule)
	req.Header.Set("Sluice-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func failures(t *testing.T, s *devenv.Sink, n int, path, rule, key string, status int) int {
	t.Helper()
	got := 0
	for range n {
		code, _ := deliver(t, s, path, rule, key)
		switch code {
		case status:
			got++
		case http.StatusOK:
		default:
			t.Fatalf("answered %d, want %d or 200", code, status)
		}
	}
	return got
}

// The demo sink fails the share of deliveries a fault selects — by path, by rule, by key —
// evenly (exactly 3 of 10 at 0.3), set at start or at run time through /_demo/fail, and
// fails none once the faults are cleared.
func TestDemoSinkFaults(t *testing.T) {
	t.Parallel()
	s, err := devenv.StartSink("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	faults, err := devenv.ParseFaults("path=/orders,status=503,share=0.3; rule=mail,key=u-1,status=429,retry_after=2")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faults {
		if err := s.SetFault(f); err != nil {
			t.Fatal(err)
		}
	}
	if got := failures(t, s, 10, "/sink/orders", "orders", "m-1", 503); got != 3 {
		t.Fatalf("share 0.3 of /orders: %d of 10 failed, want 3", got)
	}
	if got := failures(t, s, 100, "/sink/orders", "orders", "m-2", 503); got != 30 {
		t.Fatalf("share 0.3 of /orders: %d of 100 failed, want 30", got)
	}
	if got := failures(t, s, 10, "/sink/other", "orders", "m-1", 503); got != 0 {
		t.Fatalf("another path: %d failed, want none", got)
	}
	code, ra := deliver(t, s, "/sink/anything", "mail", "u-1")
	if code != 429 || ra != "2" {
		t.Fatalf("rule mail, key u-1: %d Retry-After %q, want 429 with 2", code, ra)
	}
	if code, _ := deliver(t, s, "/sink/anything", "mail", "u-2"); code != 200 {
		t.Fatalf("rule mail, another key: %d, want 200", code)
	}

	// At run time: a fault for a rule, as text and as JSON; GET lists them with counts.
	post := func(body string) (int, string) {
		resp, err := http.Post(s.URL()+"/_demo/fail", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("rule=payments,status=500"); code != 200 || !strings.Contains(body, `"rule":"payments"`) {
		t.Fatalf("POST /_demo/fail: %d %s", code, body)
	}
	if got := failures(t, s, 5, "/sink/payments", "payments", "p", 500); got != 5 {
		t.Fatalf("share 1 (the default) of rule payments: %d of 5 failed", got)
	}
	if code, body := post(`{"rule":"payments","status":500,"share":0.5}`); code != 200 {
		t.Fatalf("POST JSON: %d %s", code, body)
	}
	if got := failures(t, s, 10, "/sink/payments", "payments", "p", 500); got != 5 {
		t.Fatalf("share 0.5 replacing share 1: %d of 10 failed, want 5", got)
	}
	for _, bad := range []string{"status=700", "rule=x,status=503,share=2", "rule=x", "colour=red,status=503", `{"status":503,"bogus":1}`} {
		if code, body := post(bad); code != 400 || !strings.Contains(body, "fault") {
			t.Errorf("POST %q: %d %s, want 400 naming the fault", bad, code, body)
		}
	}
	resp, err := http.Get(s.URL() + "/_demo/fail")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Faults []struct {
			Path, Rule string
			Status     int
			Share      float64
			Selected   int64
			Failed     int64
			RetryAfter string `json:"retry_after"`
		} `json:"faults"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Faults) != 3 || list.Faults[0].Path != "/orders" || list.Faults[0].Selected != 110 || list.Faults[0].Failed != 33 ||
		list.Faults[1].RetryAfter != "2s" || list.Faults[2].Share != 0.5 {
		t.Fatalf("GET /_demo/fail: %+v", list)
	}

	// Cleared: every delivery succeeds again.
	req, _ := http.NewRequest("DELETE", s.URL()+"/_demo/fail", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE /_demo/fail: %v %v", resp, err)
	}
	if got := failures(t, s, 10, "/sink/orders", "orders", "m-1", 503); got != 0 {
		t.Fatalf("after DELETE: %d failed", got)
	}
	if s.Failed() != 33+1+5+5 {
		t.Fatalf("Failed() = %d", s.Failed())
	}
}

// A fault with a delay longer than the drainer's sink timeout is a timeout: the sink waits
// until the caller gives up.
func TestDemoSinkFaultDelay(t *testing.T) {
	t.Parallel()
	s, err := devenv.StartSink("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	f, err := devenv.ParseFault("path=/sink/slow,status=504,delay=1m")
	if err != nil {
		t.Fatal(err)
	}
	s.SetFault(f)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	start := time.Now()
	if _, err := c.Post(s.URL()+"/sink/slow", "application/json", strings.NewReader(`{}`)); err == nil {
		t.Fatal("a delivery to a delayed fault answered within the client's timeout")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}
