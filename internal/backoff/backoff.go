// Package backoff holds the one backoff of sluice: the wait before a delivery is retried,
// a parked message is re-admitted, or a failing loop tries again.
package backoff

import (
	"math/rand/v2"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

// Exponential returns the delay before retry number attempt (1-based: the delay after the
// first failed attempt is Exponential(…, 1, …)).
//
// It is exponential with full jitter, floored at lo: the ceiling doubles with every
// attempt, ceil = min(hi, lo·2^(attempt−1)), and the delay is uniform in [lo, ceil] (so
// the first retry waits exactly lo). It is the one backoff of sluice: deliveries
// (Delivery), re-admission of parked messages and the re-admitter's error waits. Full
// jitter (rather than ±10 %) is what spreads a burst of retries that all failed in the
// same second — e.g. a sink that came back after an outage — instead of having them
// return together. The floor keeps min_backoff a promise to the sink.
//
// r supplies the randomness; nil uses the goroutine-safe global source. Pass a seeded
// *rand.Rand in tests for deterministic results (a *rand.Rand is not safe for
// concurrent use). lo ≤ 0 is treated as 1 ms, hi < lo as hi = lo.
func Exponential(lo, hi time.Duration, attempt int, r *rand.Rand) time.Duration {
	if lo <= 0 {
		lo = time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	if attempt < 1 {
		attempt = 1
	}
	ceil := hi
	// lo·2^(attempt−1) without overflow: stop doubling once it passes hi.
	if n := uint(attempt - 1); n < 63 {
		if d := lo << n; d > 0 && d < hi && d>>n == lo {
			ceil = d
		}
	}
	span := ceil - lo
	if span <= 0 {
		return lo
	}
	var f float64
	if r != nil {
		f = r.Float64()
	} else {
		f = rand.Float64()
	}
	return lo + time.Duration(f*float64(span))
}

// Delivery is Exponential with the rule's delivery policy (min_backoff, max_backoff),
// using the rules package defaults (1s, 5m) for unset fields.
func Delivery(rule *rules.Rule, attempt int, r *rand.Rand) time.Duration {
	lo, hi := time.Second, 5*time.Minute
	if rule != nil {
		if rule.Delivery.MinBackoff > 0 {
			lo = rule.Delivery.MinBackoff
		}
		if rule.Delivery.MaxBackoff > 0 {
			hi = rule.Delivery.MaxBackoff
		}
	}
	return Exponential(lo, hi, attempt, r)
}
