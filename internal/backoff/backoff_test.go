package backoff

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Second, 5*time.Minute
	for attempt := 1; attempt <= 100; attempt++ {
		ceil := hi
		if attempt < 20 && lo<<(attempt-1) < hi {
			ceil = lo << (attempt - 1)
		}
		var top time.Duration
		for range 200 {
			d := Exponential(lo, hi, attempt, r)
			if d < lo || d > ceil {
				t.Fatalf("attempt %d: %s outside [%s, %s]", attempt, d, lo, ceil)
			}
			top = max(top, d)
		}
		if top < lo+(ceil-lo)*9/10 { // the whole range is used, up to the doubled ceiling
			t.Fatalf("attempt %d: the longest of 200 waits is %s, ceiling %s", attempt, top, ceil)
		}
	}
}

func TestBackoffJitterSpreads(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	// At attempt 9 the range is [1s, 256s]: 1000 draws must not bunch up.
	var low, high int
	for range 1000 {
		d := Exponential(time.Second, 5*time.Minute, 9, r)
		if d < 64*time.Second {
			low++
		}
		if d > 192*time.Second {
			high++
		}
	}
	if low < 150 || high < 150 {
		t.Errorf("jitter not spread: %d below 64s, %d above 192s of 1000", low, high)
	}
}

func TestBackoffDeterministic(t *testing.T) {
	t.Parallel()
	a := rand.New(rand.NewPCG(42, 42))
	b := rand.New(rand.NewPCG(42, 42))
	for attempt := 1; attempt < 30; attempt++ {
		if x, y := Exponential(time.Second, time.Minute, attempt, a), Exponential(time.Second, time.Minute, attempt, b); x != y {
			t.Fatalf("attempt %d: %s != %s with the same seed", attempt, x, y)
		}
	}
}

func TestBackoffEdges(t *testing.T) {
	t.Parallel()
	if d := Exponential(time.Second, time.Second, 5, nil); d != time.Second {
		t.Errorf("lo == hi: %s", d)
	}
	if d := Exponential(time.Second, 0, 3, nil); d != time.Second {
		t.Errorf("hi < lo: %s", d)
	}
	if d := Exponential(time.Hour, 1000*time.Hour, 1_000_000, nil); d < time.Hour || d > 1000*time.Hour {
		t.Errorf("huge attempt: %s", d)
	}
	if d := Exponential(time.Second, time.Minute, 1, nil); d != time.Second {
		t.Errorf("the first retry waits exactly lo: %s", d)
	}
	if d := Exponential(time.Second, time.Minute, 0, nil); d != time.Second {
		t.Errorf("attempt 0 treated as 1: %s", d)
	}
	if d := Delivery(&rules.Rule{Delivery: rules.Delivery{MinBackoff: 2 * time.Second, MaxBackoff: 3 * time.Second}}, 9, nil); d < 2*time.Second || d > 3*time.Second {
		t.Errorf("Delivery: %s", d)
	}
	if d := Delivery(nil, 2, nil); d < time.Second || d > 2*time.Second {
		t.Errorf("Delivery defaults: %s", d)
	}
}
