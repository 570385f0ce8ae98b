package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRateLimitHeadersOnRefusal(t *testing.T) {
	h := http.Header{}
	SetRateLimitHeaders(h, RateLimit{Policy: "orders-per-merchant", Limit: 100, Remaining: 0, Reset: 1500 * time.Millisecond, Window: 10 * time.Second, RetryAfter: 2100 * time.Millisecond})
	want := map[string]string{
		"X-RateLimit-Limit":       "100",
		"X-RateLimit-Remaining":   "0",
		"X-RateLimit-Reset":       "2",
		"X-RateLimit-Retry-After": "3",
		"Retry-After":             "3",
		"RateLimit-Policy":        `"orders-per-merchant";q=100;w=10`,
		"RateLimit":               `"orders-per-merchant";r=0;t=2`,
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestRateLimitHeadersOnSuccessHaveNoRetryAfter(t *testing.T) {
	h := http.Header{}
	SetRateLimitHeaders(h, RateLimit{Policy: `we"ird\name`, Limit: 5, Remaining: -3, Reset: 0, Window: 0})
	if h.Get("Retry-After") != "" || h.Get("X-RateLimit-Retry-After") != "" {
		t.Fatal("Retry-After on a success")
	}
	if got := h.Get("RateLimit"); got != `"we\"ird\\name";r=0;t=0` {
		t.Fatalf("RateLimit = %q", got)
	}
	if got := h.Get("RateLimit-Policy"); got != `"we\"ird\\name";q=5;w=1` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
}

func TestWriteProblem(t *testing.T) {
	rec := httptest.NewRecorder()
	p := BadRequest("descriptor[0].value", "must be at most 256 bytes")
	WriteProblem(rec, p)
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["field"] != "descriptor[0].value" || got["type"] != TypeInvalidRequest || got["status"] != float64(400) {
		t.Fatalf("%v", got)
	}
}

func TestSecondsRoundsUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		min  int64
		want int64
	}{{0, 1, 1}, {time.Millisecond, 0, 1}, {time.Second, 1, 1}, {1001 * time.Millisecond, 1, 2}, {-time.Second, 0, 0}} {
		if got := Seconds(c.d, c.min); got != c.want {
			t.Errorf("Seconds(%v,%d) = %d, want %d", c.d, c.min, got, c.want)
		}
	}
}

func TestRateLimitPolicyNameIsAQuotedStructuredFieldString(t *testing.T) {
	h := http.Header{}
	SetRateLimitHeaders(h, RateLimit{Policy: "a\"b\\c\nd€", Limit: 5, Remaining: 2, Reset: time.Second, Window: time.Minute})
	if got, want := h.Get("RateLimit-Policy"), `"a\"b\\c_d___";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
	if got, want := h.Get("RateLimit"), `"a\"b\\c_d___";r=2;t=1`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	// Each field is its own slice: appending to one must not change another.
	h.Add("X-RateLimit-Limit", "x")
	if got := h.Get("X-RateLimit-Remaining"); got != "2" {
		t.Errorf("X-RateLimit-Remaining = %q after appending to X-RateLimit-Limit", got)
	}
}
