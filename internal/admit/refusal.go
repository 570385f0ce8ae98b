package admit

import "github.com/sluice-io/sluice/internal/httpx"

// RateLimit is the rate-limit headers of an admission's answer (no Policy: none).
func (r Result) RateLimit() httpx.RateLimit {
	return httpx.RateLimit{Policy: r.Policy, Limit: r.Limit, Remaining: r.Remaining,
		Reset: r.Reset, Window: r.Window, RetryAfter: r.RetryAfter}
}

// Refusal is the answer to a refused admission res: 429 #quota-exceeded naming why (its
// key's queue is full, its admission limit exhausted, its rule's queue full), its violated
// policies, Retry-After and rate-limit headers. A submission (internal/ingress) and a dead
// letter's replay (internal/admin) answer it alike; more, when set, is added to the detail
// ("the dead letter is kept").
func Refusal(res Result, more string) (httpx.Problem, httpx.RateLimit) {
	detail := "the queue of this key is full"
	switch res.Reason {
	case ReasonLimit:
		detail = "the admission limit of this key is exhausted"
	case ReasonRuleFull:
		detail = "the queue of this rule is full (its max_bytes): no key of it is admitted until its messages drain"
	}
	if more != "" {
		detail += "; " + more
	}
	return httpx.QuotaExceeded(detail, res.RetryAfter, res.Violated...), res.RateLimit()
}
