package sinktest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestKeyLimitAdmit(t *testing.T) {
	t.Parallel()
	l := NewKeyLimit(3, time.Second)
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		key  string
		ms   int
		ok   bool
		wait time.Duration
	}{
		{"a", 0, true, 0}, {"a", 100, true, 0}, {"a", 200, true, 0},
		{"a", 300, false, 700 * time.Millisecond}, // full: the one at 0 leaves at 1000
		{"b", 300, true, 0},                       // per key
		{"a", 999, false, time.Millisecond},
		{"a", 1000, true, 0}, // the one at 0 left the window
		{"a", 1050, false, 50 * time.Millisecond},
	} {
		if ok, wait := l.Admit(c.key, at(c.ms)); ok != c.ok || wait != c.wait {
			t.Errorf("%s at %d ms: %v %v, want %v %v", c.key, c.ms, ok, wait, c.ok, c.wait)
		}
	}
}

// TestStartLimited: over real HTTP, ten quick deliveries of one key get 7 × 200 and 3 ×
// 429 with Retry-After: 1; another key has its own window.
func TestStartLimited(t *testing.T) {
	t.Parallel()
	s, _ := StartLimited(t, 7, time.Second)
	post := func(key string) *http.Response {
		req, _ := http.NewRequest("POST", s.URL, strings.NewReader(`{}`))
		req.Header.Set("Sluice-Key", url.PathEscape(key))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	start := time.Now()
	for i := range 10 {
		r := post("m-1")
		want := 200
		if i >= 7 {
			want = 429
		}
		if r.StatusCode != want || (want == 429 && r.Header.Get("Retry-After") != "1") {
			t.Fatalf("delivery %d: %d Retry-After %q, want %d", i, r.StatusCode, r.Header.Get("Retry-After"), want)
		}
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Skip("the ten requests took longer than the window: the host is too slow for this check")
	}
	if r := post("m-2"); r.StatusCode != 200 {
		t.Fatalf("another key: %d", r.StatusCode)
	}
	if c := s.CountsSince("m-1", start); c != (Counts{Accepted: 7, Throttled: 3}) {
		t.Fatalf("counts %+v", c)
	}
}
