package sink

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// received is what a test sink saw.
type received struct {
	method string
	header http.Header
	body   []byte
}

// recordingServer answers with handler after recording each request.
func recordingServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, func() []received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{method: r.Method, header: r.Header.Clone(), body: body})
		mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), got...)
	}
}

func testRule(sinkURL string) *rules.Rule {
	return &rules.Rule{
		Name:     "orders-per-merchant",
		Sink:     rules.Sink{URL: sinkURL, Timeout: 2 * time.Second},
		Delivery: rules.Delivery{MaxAttempts: 8, MinBackoff: time.Second, MaxBackoff: 5 * time.Minute},
	}
}

func testMessage() queue.Message {
	return queue.Message{
		ID:        "0192f5e4-7c1a-7d2e-9a41-1b2c3d4e5f60",
		Rule:      "orders-per-merchant",
		Key:       "m/42 café 🚀",
		Payload:   []byte("{ \"order_id\" : 991,\n\t\"note\": \"crème brûlée 🍮\\u00e9\" , \"total\":\"12.50\" }  "),
		CreatedAt: time.Date(2026, 11, 22, 4, 53, 1, 234_567_890, time.UTC),
		Attempt:   2,
		Fence:     1795500000000042,
	}
}

func newHTTP(t *testing.T) *HTTP {
	t.Helper()
	h, err := NewHTTP(HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHTTPHeadersAndPayload(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h := newHTTP(t)
	m := testMessage()

	o := h.Deliver(context.Background(), testRule(srv.URL+"/submit"), m)
	if o.Verdict != delivery.Delivered || o.Status != http.StatusAccepted {
		t.Fatalf("outcome = %+v, want delivered 202", o)
	}
	reqs := got()
	if len(reqs) != 1 {
		t.Fatalf("sink saw %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != http.MethodPost {
		t.Errorf("method = %s, want POST", r.method)
	}
	if !bytes.Equal(r.body, m.Payload) {
		t.Errorf("payload not byte-for-byte:\n got %q\nwant %q", r.body, m.Payload)
	}
	want := map[string]string{
		"Content-Type":       "application/json",
		"Idempotency-Key":    m.ID,
		"Sluice-Message-Id":  m.ID,
		"Sluice-Attempt":     "3",
		"Sluice-Rule":        "orders-per-merchant",
		"Sluice-Key":         "m%2F42%20caf%C3%A9%20%F0%9F%9A%80",
		"Sluice-Enqueued-At": "2026-11-22T04:53:01.234Z",
		"Sluice-Fence":       "1795500000000042",
	}
	for k, v := range want {
		if g := r.header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	// The key survives the round trip exactly.
	if k, err := url.PathUnescape(r.header.Get("Sluice-Key")); err != nil || k != m.Key {
		t.Errorf("Sluice-Key decodes to %q (%v), want %q", k, err, m.Key)
	}
	if ts, err := time.Parse(time.RFC3339, r.header.Get("Sluice-Enqueued-At")); err != nil || !ts.Equal(m.CreatedAt.Truncate(time.Millisecond)) {
		t.Errorf("Sluice-Enqueued-At parses to %v (%v)", ts, err)
	}
}

func TestHTTPOutcomes(t *testing.T) {
	t.Parallel()
	httpDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	longBody := strings.Repeat("x", 10_000)

	tests := []struct {
		name        string
		handler     http.HandlerFunc
		verdict     delivery.Verdict
		status      int
		retryMin    time.Duration // RetryAfter bounds (Retry only)
		retryMax    time.Duration
		errContains []string
		errMaxLen   int
	}{
		{name: "200", handler: status(200, nil, ""), verdict: delivery.Delivered, status: 200},
		{name: "204", handler: status(204, nil, ""), verdict: delivery.Delivered, status: 204},
		{name: "429 retry-after seconds", handler: status(429, map[string]string{"Retry-After": "7"}, "slow down"),
			verdict: delivery.Retry, status: 429, retryMin: 7 * time.Second, retryMax: 7 * time.Second, errContains: []string{"429", "slow down"}},
		{name: "429 retry-after http-date", handler: status(429, map[string]string{"Retry-After": httpDate}, ""),
			verdict: delivery.Retry, status: 429, retryMin: 60 * time.Second, retryMax: 91 * time.Second},
		{name: "429 retry-after too large is capped", handler: status(429, map[string]string{"Retry-After": "31536000"}, ""),
			verdict: delivery.Retry, status: 429, retryMin: time.Hour, retryMax: time.Hour},
		{name: "503 without retry-after uses backoff", handler: status(503, nil, "maintenance"),
			verdict: delivery.Retry, status: 503, errContains: []string{"503", "maintenance"}},
		{name: "503 garbage retry-after uses backoff", handler: status(503, map[string]string{"Retry-After": "soon"}, ""),
			verdict: delivery.Retry, status: 503},
		{name: "400 dead with body", handler: status(400, nil, "{\"error\":\"bad\norder\"}"),
			verdict: delivery.Dead, status: 400, errContains: []string{"400", `{"error":"bad order"}`}},
		{name: "404 dead", handler: status(404, nil, "no such route"),
			verdict: delivery.Dead, status: 404, errContains: []string{"404", "no such route"}},
		{name: "409 dead, long body bounded", handler: status(409, nil, longBody),
			verdict: delivery.Dead, status: 409, errContains: []string{"409"}, errMaxLen: 400},
		{name: "500 retry", handler: status(500, nil, "boom"),
			verdict: delivery.Retry, status: 500, errContains: []string{"500", "boom"}},
		{name: "502 retry", handler: status(502, nil, ""), verdict: delivery.Retry, status: 502},
		{name: "302 dead, not followed", handler: status(302, map[string]string{"Location": "/elsewhere"}, ""),
			verdict: delivery.Dead, status: 302, errContains: []string{"302", "/elsewhere"}},
	}
	h := newHTTP(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := recordingServer(t, tc.handler)
			o := h.Deliver(context.Background(), testRule(srv.URL), testMessage())
			if o.Verdict != tc.verdict || o.Status != tc.status {
				t.Fatalf("outcome = %+v, want %v status %d", o, tc.verdict, tc.status)
			}
			if o.RetryAfter < tc.retryMin || o.RetryAfter > tc.retryMax {
				t.Errorf("RetryAfter = %s, want in [%s, %s]", o.RetryAfter, tc.retryMin, tc.retryMax)
			}
			for _, s := range tc.errContains {
				if !strings.Contains(o.Err, s) {
					t.Errorf("Err = %q, want it to contain %q", o.Err, s)
				}
			}
			if tc.verdict != delivery.Delivered && o.Err == "" {
				t.Error("Err is empty for a failed delivery")
			}
			if tc.errMaxLen > 0 && len(o.Err) > tc.errMaxLen {
				t.Errorf("Err has %d bytes, want ≤ %d", len(o.Err), tc.errMaxLen)
			}
		})
	}
}

func status(code int, hdr map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	rule := testRule(srv.URL)
	rule.Sink.Timeout = 150 * time.Millisecond
	start := time.Now()
	o := newHTTP(t).Deliver(context.Background(), rule, testMessage())
	if o.Verdict != delivery.Retry || !strings.Contains(o.Err, "timeout") || !o.Timeout {
		t.Fatalf("outcome = %+v, want retry with a timeout", o)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("delivery took %s with a 150ms rule timeout", el)
	}
}

func TestHTTPCancelledIsRetry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled while the request is at the sink.
	srv, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { cancel(); <-r.Context().Done() })
	o := newHTTP(t).Deliver(ctx, testRule(srv.URL), testMessage())
	if o.Verdict != delivery.Retry || !strings.Contains(o.Err, "cancel") {
		t.Fatalf("outcome = %+v, want retry (cancelled)", o)
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := newHTTP(t).Deliver(context.Background(), testRule("http://"+addr+"/x"), testMessage())
	if o.Verdict != delivery.Retry || o.Err == "" || o.Timeout {
		t.Fatalf("outcome = %+v, want retry with an error (not a timeout)", o)
	}
}

func TestHTTPBadConfigIsDead(t *testing.T) {
	t.Parallel()
	h := newHTTP(t)
	for _, u := range []string{"", "http://[::1"} {
		if o := h.Deliver(context.Background(), testRule(u), testMessage()); o.Verdict != delivery.Dead {
			t.Errorf("url %q: outcome = %+v, want dead", u, o)
		}
	}
}

// Keep-alive: many deliveries reuse a few connections because bodies are drained.
func TestHTTPReusesConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		w.WriteHeader(500)
		_, _ = io.WriteString(w, strings.Repeat("e", 4096))
	}))
	srv.Start()
	t.Cleanup(srv.Close)
	h := newHTTP(t)
	for range 50 {
		if o := h.Deliver(context.Background(), testRule(srv.URL), testMessage()); o.Verdict != delivery.Retry {
			t.Fatalf("outcome = %+v", o)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) > 2 {
		t.Errorf("50 sequential deliveries used %d connections, want keep-alive reuse", len(conns))
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"12", 12 * time.Second},
		{" 12 ", 12 * time.Second},
		{"99999999999999", time.Hour},
		{"Sun, 22 Nov 2026 05:01:30 GMT", 90 * time.Second},
		{"Sunday, 22-Nov-26 05:00:10 GMT", 10 * time.Second},
		{"Sun, 22 Nov 2026 04:00:00 GMT", 0},
		{"in a bit", 0},
	}
	for _, tc := range tests {
		if got := ParseRetryAfter(tc.in, now, time.Hour); got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "12", "-1", "Sun, 22 Nov 2026 05:01:30 GMT", "99999999999999999999", "1e3", " 7 "} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d := ParseRetryAfter(v, now, time.Hour)
		if d < 0 || d > time.Hour {
			t.Fatalf("ParseRetryAfter(%q) = %s, want within [0, 1h]", v, d)
		}
	})
}
