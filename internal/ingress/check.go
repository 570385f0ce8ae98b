package ingress

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
)

// POST /v1/check answers like envoyproxy/ratelimit's /json endpoint: one status per
// descriptor, overall OVER_LIMIT (HTTP 429) when any enforced limit is over.

type checkStatus struct {
	Code               string        `json:"code"`
	CurrentLimit       *currentLimit `json:"current_limit,omitempty"`
	LimitRemaining     int64         `json:"limit_remaining"`
	DurationUntilReset string        `json:"duration_until_reset,omitempty"`
}

type currentLimit struct {
	Name            string `json:"name,omitempty"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

type checkResponse struct {
	OverallCode string        `json:"overall_code"`
	Statuses    []checkStatus `json:"statuses"`
}

const (
	codeOK        = "OK"
	codeOverLimit = "OVER_LIMIT"
)

func unitOf(d time.Duration) string {
	switch d {
	case time.Second:
		return "SECOND"
	case time.Minute:
		return "MINUTE"
	case time.Hour:
		return "HOUR"
	case 24 * time.Hour:
		return "DAY"
	case 7 * 24 * time.Hour:
		return "WEEK"
	case 30 * 24 * time.Hour:
		return "MONTH"
	case 365 * 24 * time.Hour:
		return "YEAR"
	}
	return "UNKNOWN"
}

// protoDuration renders d like protobuf's JSON Duration ("43s", "3.353s"): whole seconds,
// then up to nine fractional digits without trailing zeros, from integers (formatting
// d.Seconds() gave "3.3529999999999998s", which protojson rejects).
func protoDuration(d time.Duration) string {
	b := make([]byte, 0, 24)
	if d < 0 {
		b = append(b, '-')
		d = -d // time.Duration's minimum is not a whole number of seconds: no overflow here
	}
	b = strconv.AppendInt(b, int64(d/time.Second), 10)
	if frac := int64(d % time.Second); frac != 0 {
		digits := strconv.AppendInt(nil, 1e9+frac, 10)[1:] // nine digits, leading zeros kept
		for digits[len(digits)-1] == '0' {
			digits = digits[:len(digits)-1]
		}
		b = append(append(b, '.'), digits...)
	}
	return string(append(b, 's'))
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	body, bp, prob := s.readBody(w, r)
	defer s.releaseBody(bp)
	if prob != nil {
		httpx.WriteProblem(w, *prob)
		return
	}
	var req checkRequest
	if p := decodeJSON(r, body, &req); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if p := validateDomain(req.Domain); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if len(req.Descriptors) == 0 {
		httpx.WriteProblem(w, httpx.BadRequest("descriptors", "is required: a list of {entries: [{key, value}]}"))
		return
	}
	if len(req.Descriptors) > MaxCheckDescriptors {
		httpx.WriteProblem(w, httpx.BadRequest("descriptors", "has more than "+strconv.Itoa(MaxCheckDescriptors)+" descriptors"))
		return
	}
	descs := make([][]rules.Entry, len(req.Descriptors))
	for i, d := range req.Descriptors {
		if p := validateEntries("descriptors["+strconv.Itoa(i)+"].entries", d.Entries); p != nil {
			httpx.WriteProblem(w, *p)
			return
		}
		descs[i] = toRuleEntries(d.Entries)
	}
	hits := int64(1)
	if req.HitsAddend != nil {
		if *req.HitsAddend < 0 {
			httpx.WriteProblem(w, httpx.BadRequest("hits_addend", "must not be negative"))
			return
		}
		if *req.HitsAddend > 0 { // envoy: 0 counts as 1
			hits = *req.HitsAddend
		}
	}

	now := s.cfg.Now()
	ctx := r.Context()
	resp := checkResponse{OverallCode: codeOK, Statuses: make([]checkStatus, len(descs))}
	var headers *httpx.RateLimit
	for i, cr := range s.cfg.Rules().Check(req.Domain, descs) {
		st := checkStatus{Code: codeOK}
		if !cr.Applies() || len(cr.Rule.RateLimits) == 0 || s.cfg.Limits == nil {
			resp.Statuses[i] = st
			if cr.Rule != nil {
				s.metrics.checks.WithLabelValues(cr.Rule.Name, codeOK).Inc()
			}
			continue
		}
		rule := cr.Rule
		res, err := s.cfg.Limits.Allow(ctx, admit.LimitKey(rule.Name, cr.Key), admit.Limits(rule), hits, now)
		if err != nil {
			if errors.Is(err, bucket.ErrInvalid) {
				s.internalError(w, rule.Name, err)
				return
			}
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnavailable, Status: http.StatusServiceUnavailable,
				Detail: "the limiter store is unreachable", RetryAfter: 1})
			return
		}
		d := res.Decision()
		lim := rule.RateLimits[0]
		if res.Index >= 0 && res.Index < len(rule.RateLimits) {
			lim = rule.RateLimits[res.Index]
		}
		st.CurrentLimit = &currentLimit{Name: lim.Name, RequestsPerUnit: lim.Rate.Requests, Unit: unitOf(lim.Rate.Interval)}
		st.LimitRemaining = d.Remaining
		st.DurationUntilReset = protoDuration(d.ResetAfter.Truncate(time.Millisecond))
		code := codeOK
		if !res.Allowed {
			st.Code = codeOverLimit
			code = codeOverLimit
			resp.OverallCode = codeOverLimit
		} else if res.ShadowDenied {
			code = "SHADOW_OVER_LIMIT"
		}
		s.metrics.checks.WithLabelValues(rule.Name, code).Inc()
		resp.Statuses[i] = st
		name := lim.Name
		if name == "" {
			name = rule.Name
		}
		rl := httpx.RateLimit{Policy: name, Limit: d.Limit, Remaining: d.Remaining, Reset: d.ResetAfter, Window: d.Window}
		if !res.Allowed {
			rl.RetryAfter = res.RetryAfter()
			if rl.RetryAfter == bucket.Never {
				rl.RetryAfter = d.Window
			}
		}
		// The headers describe the tightest policy: a refusal first (the longest wait),
		// else the one with the fewest requests left.
		if headers == nil || (rl.RetryAfter > headers.RetryAfter) || (headers.RetryAfter == 0 && rl.RetryAfter == 0 && rl.Remaining < headers.Remaining) {
			headers = &rl
		}
	}
	if headers != nil {
		httpx.SetRateLimitHeaders(w.Header(), *headers)
	}
	code := http.StatusOK
	if resp.OverallCode == codeOverLimit {
		code = http.StatusTooManyRequests
	}
	httpx.WriteJSON(w, code, resp)
}
