package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// seen is one request as the test server received it.
type seen struct {
	Method, RequestURI, EscapedPath string
	Header                          http.Header
	Body                            []byte
}

// answer is one canned answer; fn, when set, writes it instead (to cut connections).
type answer struct {
	status int
	header map[string]string
	body   string
	fn     func(w http.ResponseWriter, r *http.Request)
}

// script is an httptest server that answers with its answers in order (the last one
// repeats) and records every request. It plays back answers documented in docs/http-api.md; it
// tests the client's reading of them, not sluice's behaviour.
type script struct {
	*httptest.Server
	mu      sync.Mutex
	answers []answer
	reqs    []seen
}

func newScript(t *testing.T, answers ...answer) *script {
	t.Helper()
	s := &script{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *script) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, seen{Method: r.Method, RequestURI: r.RequestURI, EscapedPath: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: b})
	a := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	if a.fn != nil {
		a.fn(w, r)
		return
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" && a.body != "" {
		ct := "application/json"
		if a.status >= 400 && a.status != 429 || a.status == 429 && r.URL.Path == "/v1/messages" {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (s *script) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// hangUp closes the connection without an answer (a crashed ingress or a cut network).
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// fakeClock is a fixed clock whose sleeps are recorded and return at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sleeps = append(f.sleeps, d)
	f.now = f.now.Add(d)
	return nil
}

func (f *fakeClock) Sleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

func newClient(t *testing.T, url string, opts ...client.Option) (*client.Client, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	c, err := client.New(url, append([]client.Option{client.WithClock(clk.Now, clk.Sleep)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

func decodeBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return m
}

var orders = []client.Entry{{Key: "merchant_id", Value: "m-42"}}

const (
	queuedBody = `{"id":"0193a1b2-0000-7000-8000-000000000001","state":"queued","depth":3,"capacity":100,"eta":"2026-11-22T05:00:01Z"}`
	overBody   = `{"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the queue of this key is full","violated-policies":["orders-per-merchant"],"retry_after":2}`
)

var queuedHeaders = map[string]string{
	"Location":              "/v1/messages/0193a1b2-0000-7000-8000-000000000001",
	"X-RateLimit-Limit":     "100",
	"X-RateLimit-Remaining": "97",
	"X-RateLimit-Reset":     "1",
	"RateLimit-Policy":      `"orders-per-merchant";q=100;w=10`,
	"RateLimit":             `"orders-per-merchant";r=97;t=1`,
}

var overHeaders = map[string]string{
	"Retry-After":             "2",
	"X-RateLimit-Limit":       "100",
	"X-RateLimit-Remaining":   "0",
	"X-RateLimit-Reset":       "1",
	"X-RateLimit-Retry-After": "2",
	"RateLimit-Policy":        `"orders-per-merchant";q=100;w=10`,
	"RateLimit":               `"orders-per-merchant";r=0;t=1`,
}
