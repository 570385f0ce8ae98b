package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/sinktest"
)

type simResult struct {
	delivered, throttled int
	seconds              float64
}

// simulate drives one key at configured/s against a sink admitting limit/s, with the
// key's outflow from l (GCRA pacing at l.Every, held by l.HeldUntil), for warm+measure,
// and counts what happened in the measured part. A delivery takes 20 ms; a 429'd message
// is the key's head and goes again at the next slot (strict ordering).
func simulate(l *Limiter, configured float64, limit int, warm, measure time.Duration) simResult {
	// The self-limiting sink of the engine's end-to-end test, driven at simulated instants.
	sink := sinktest.NewKeyLimit(limit, time.Second)
	every := time.Duration(float64(time.Second) / configured)
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	now, tat := start, start
	var r simResult
	for now.Sub(start) < warm+measure {
		slot := tat
		if h := l.HeldUntil("k"); h.After(slot) {
			slot = h
		}
		if slot.After(now) {
			now = slot
		}
		e := l.Every("k", every)
		if now.Sub(tat) >= e {
			tat = now.Add(e)
		} else {
			tat = tat.Add(e)
		}
		ok, wait := sink.Admit("k", now)
		ra := time.Duration(math.Ceil(wait.Seconds())) * time.Second // Retry-After in whole seconds
		done := now.Add(20 * time.Millisecond)
		counted := now.Sub(start) >= warm
		if ok {
			l.OnSuccess("k", done)
			if counted {
				r.delivered++
			}
		} else {
			l.OnThrottle("k", done, ra)
			if counted {
				r.throttled++
			}
		}
		now = done
	}
	r.seconds = measure.Seconds()
	return r
}

// TestConvergesToTheSinksLimit: a rule says 10/s, the sink admits 7/s per key and answers
// the rest 429 + Retry-After (whole seconds). With the default configuration, after a
// minute to converge, over ten minutes fewer than 10 % of the attempts are refused and the
// key gets 6–7/s (measured: 6.43/s, 0.2 %). The other limits are logged for docs/rules.md.
func TestConvergesToTheSinksLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{9, 7, 5, 3, 1} {
		r := simulate(New(Config{}), 10, limit, time.Minute, 10*time.Minute)
		attempts := r.delivered + r.throttled
		share := float64(r.throttled) / float64(attempts)
		rate := float64(r.delivered) / r.seconds
		t.Logf("sink at %d/s, rule 10/s: %.2f/s delivered, %.1f %% of %d attempts answered 429", limit, rate, 100*share, attempts)
		if limit != 7 {
			continue
		}
		if share >= 0.10 {
			t.Errorf("%.1f %% of attempts throttled, want < 10 %%", 100*share)
		}
		if rate < 6 || rate > 7 {
			t.Errorf("throughput %.2f/s, want 6–7/s", rate)
		}
	}
	// Without adaptive outflow, for contrast: the key keeps sending at 10/s.
	sink := sinktest.NewKeyLimit(7, time.Second)
	refused := 0
	for i := range 6000 {
		if ok, _ := sink.Admit("k", t0.Add(time.Duration(i)*100*time.Millisecond)); !ok {
			refused++
		}
	}
	t.Logf("without adaptive outflow: %.0f %% of attempts answered 429", float64(refused)/60)
}
