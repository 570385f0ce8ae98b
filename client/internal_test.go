package client

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffCeiling(t *testing.T) {
	t.Parallel()
	base, cap := 250*time.Millisecond, 20*time.Second
	for _, tc := range []struct {
		retry int
		want  time.Duration
	}{{1, 250 * time.Millisecond}, {2, 500 * time.Millisecond}, {3, time.Second}, {7, 16 * time.Second}, {8, 20 * time.Second}, {1000, 20 * time.Second}} {
		if got := backoffCeiling(base, cap, tc.retry); got != tc.want {
			t.Errorf("backoffCeiling(retry %d) = %v, want %v", tc.retry, got, tc.want)
		}
	}
	// Huge caps and retry counts never overflow into negative waits.
	if got := backoffCeiling(time.Second, time.Duration(1<<62), 500); got <= 0 {
		t.Fatalf("overflow: %v", got)
	}
}

// Full jitter: every wait in [0, min(cap, base·2^(n-1))], spread over the whole range.
func TestBackoffFullJitter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	c := &Client{backoffBase: 100 * time.Millisecond, backoffCap: 3 * time.Second,
		jitter: func(max time.Duration) time.Duration { return time.Duration(r.Int64N(int64(max) + 1)) }}
	for retry := 1; retry <= 12; retry++ {
		ceiling := min(c.backoffCap, c.backoffBase<<(retry-1))
		var lo, hi int
		for range 2000 {
			d := c.backoff(retry)
			if d < 0 || d > ceiling {
				t.Fatalf("retry %d: %v outside [0, %v]", retry, d, ceiling)
			}
			if d < ceiling/4 {
				lo++
			}
			if d > ceiling*3/4 {
				hi++
			}
		}
		if lo < 300 || hi < 300 { // ~500 expected in each quarter
			t.Fatalf("retry %d: not uniform (%d low, %d high of 2000)", retry, lo, hi)
		}
	}
}

func TestDefaultJitterBounds(t *testing.T) {
	t.Parallel()
	c, err := New("http://x")
	if err != nil {
		t.Fatal(err)
	}
	for range 10000 {
		if d := c.backoff(3); d < 0 || d > time.Second {
			t.Fatalf("%v", d)
		}
	}
	if d := c.jitter(0); d != 0 {
		t.Fatalf("jitter(0) = %v", d)
	}
}

func TestEscapeSegment(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"a": "a", "a/b": "a%2Fb", ".": "%2E", "..": "%2E%2E", "...": "...", "": "", "a b": "a%20b"} {
		if got := escapeSegment(in); got != want {
			t.Errorf("escapeSegment(%q) = %q, want %q", in, got, want)
		}
	}
}
