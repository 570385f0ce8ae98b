package adaptive

import (
	"math"
	"testing"
	"time"
)

// slidingSink admits at most limit requests per key within any second (a sliding window
// log, as a downstream that counts this way) and answers the others 429 with a
// Retry-After in whole seconds (HTTP's form): the time until the oldest admission leaves
// the window, rounded up.
type slidingSink struct {
	limit    int
	admitted []time.Time
}

func (s *slidingSink) call(now time.Time) (ok bool, retryAfter time.Duration) {
	for len(s.admitted) > 0 && now.Sub(s.admitted[0]) >= time.Second {
		s.admitted = s.admitted[1:]
	}
	if len(s.admitted) < s.limit {
		s.admitted = append(s.admitted, now)
		return true, 0
	}
	wait := s.admitted[0].Add(time.Second).Sub(now)
	return false, time.Duration(math.Ceil(wait.Seconds())) * time.Second
}

type simResult struct {
	delivered, throttled int
	seconds              float64
}

// simulate drives one key at configured/s against a sink admitting limit/s, with the
// key's outflow from l (GCRA pacing at l.Every, held by l.HeldUntil), for warm+measure,
// and counts what happened in the measured part. A delivery takes 20 ms; a 429'd message
// is the key's head and goes again at the next slot (strict ordering).
func simulate(l *Limiter, configured float64, limit int, warm, measure time.Duration) simResult {
	sink := &slidingSink{limit: limit}
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
		ok, ra := sink.call(now)
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
	sink := &slidingSink{limit: 7}
	refused := 0
	for i := range 6000 {
		if ok, _ := sink.call(t0.Add(time.Duration(i) * 100 * time.Millisecond)); !ok {
			refused++
		}
	}
	t.Logf("without adaptive outflow: %.0f %% of attempts answered 429", float64(refused)/60)
}
