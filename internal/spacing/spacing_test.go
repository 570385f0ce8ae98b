package spacing

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestNextSlot(t *testing.T) {
	t.Parallel()
	every := ms(100)
	for _, c := range []struct {
		name           string
		tat, last, now time.Time
		strict         bool
		want           time.Time
	}{
		{"first delivery, gcra", time.Time{}, time.Time{}, t0, false, t0},
		{"first delivery, strict", time.Time{}, time.Time{}, t0, true, t0},
		{"tat ahead", t0.Add(ms(50)), t0.Add(-ms(50)), t0, false, t0.Add(ms(50))},
		{"tat passed", t0.Add(-ms(10)), t0.Add(-ms(200)), t0, false, t0},
		// The previous delivery started 80 ms late (at tat-20ms+80ms): gcra keeps its slot,
		// strict waits a whole interval from the late start.
		{"late start, gcra", t0.Add(ms(100)), t0.Add(ms(80)), t0.Add(ms(90)), false, t0.Add(ms(100))},
		{"late start, strict", t0.Add(ms(100)), t0.Add(ms(80)), t0.Add(ms(90)), true, t0.Add(ms(180))},
		{"strict, on time", t0.Add(ms(100)), t0, t0.Add(ms(10)), true, t0.Add(ms(100))},
		{"unpaced", t0.Add(ms(100)), t0, t0, true, t0},
	} {
		e := every
		if c.name == "unpaced" {
			e = 0
		}
		if got := NextSlot(c.tat, c.last, c.now, e, c.strict); !got.Equal(c.want) {
			t.Errorf("%s: NextSlot = %v, want %v", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	every := ms(100)
	for _, c := range []struct {
		name       string
		tat, start time.Time
		want       time.Time
	}{
		{"first", time.Time{}, t0, t0.Add(every)},
		{"on time", t0, t0, t0.Add(every)},
		{"a little late keeps the grid", t0, t0.Add(ms(30)), t0.Add(every)},
		{"idle key banks nothing", t0, t0.Add(ms(500)), t0.Add(ms(600))},
	} {
		if got := Advance(c.tat, c.start, every); !got.Equal(c.want) {
			t.Errorf("%s: Advance = %v, want %v", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

// simulate paces 1,000 deliveries of one key at every, each starting at its slot plus a
// random lateness (a worker busy, a GC pause) of up to 90 % of an interval, one in four
// on time, and returns the start times.
func simulate(strict bool, seed uint64) []time.Time {
	r := rand.New(rand.NewPCG(seed, 1))
	every := ms(100)
	var tat, last time.Time
	now := t0
	starts := make([]time.Time, 0, 1000)
	for range 1000 {
		slot := NextSlot(tat, last, now, every, strict)
		start := slot
		if r.IntN(4) != 0 {
			start = slot.Add(time.Duration(r.Int64N(int64(every) * 9 / 10)))
		}
		starts = append(starts, start)
		tat = Advance(tat, start, every)
		last = start
		now = start
	}
	return starts
}

// TestStrictNeverCloser: over 1,000 deliveries with random late starts, strict never
// starts two within the interval, and never more than 10 within any 1 s at 10/s; gcra
// (for contrast, and so the test shows what strict is for) does both.
func TestStrictNeverCloser(t *testing.T) {
	t.Parallel()
	every := ms(100)
	for seed := uint64(1); seed <= 20; seed++ {
		s := simulate(true, seed)
		for i := 1; i < len(s); i++ {
			if gap := s[i].Sub(s[i-1]); gap < every {
				t.Fatalf("seed %d: strict: deliveries %d and %d are %v apart (< %v)", seed, i-1, i, gap, every)
			}
		}
		if n := maxInWindow(s, time.Second); n > 10 {
			t.Fatalf("seed %d: strict: %d starts within 1 s at 10/s", seed, n)
		}
	}
	g := simulate(false, 1)
	closer := 0
	for i := 1; i < len(g); i++ {
		if g[i].Sub(g[i-1]) < every {
			closer++
		}
	}
	if closer == 0 || maxInWindow(g, time.Second) <= 10 {
		t.Fatalf("gcra: %d gaps under the interval, at most %d starts in 1 s: expected the late-start bunching strict removes", closer, maxInWindow(g, time.Second))
	}
	// gcra keeps the long-run rate: 1,000 deliveries in about 100 s.
	if span := g[len(g)-1].Sub(g[0]); span > 101*time.Second {
		t.Fatalf("gcra: 1,000 deliveries took %v", span)
	}
}

// maxInWindow is the most starts within any half-open window [s, s+w).
func maxInWindow(starts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
