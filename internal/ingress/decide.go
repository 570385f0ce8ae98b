package ingress

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
)

// One decision path answers POST /v1/check and the envoy RLS gRPC ShouldRateLimit: the
// transports differ only in how a request is decoded and an answer encoded, so the two can
// never disagree (TestCheckParity sends the same sequences to both).

// Transports, the transport label of sluice_checks_total.
const (
	transportHTTP = "http"
	transportGRPC = "grpc"
)

// checkDescriptor is one descriptor of a check request, already validated.
type checkDescriptor struct {
	Entries []rules.Entry
	Hits    int64 // ≥ 1: envoy counts a hits_addend of 0 as 1
	// Override is the descriptor's own limit (envoy's RateLimitOverride): when set it is
	// the limit, whatever the rules say, counted per domain and descriptor entries.
	Override *rules.RateLimit
}

// overrideRule names the limits of descriptors that bring their own (label of
// sluice_checks_total; the key never reaches a label).
const overrideRule = "override"

// overrideKey is the limiter key of a descriptor with a limit override: the domain and
// every entry, each length-prefixed so no two descriptors share one.
func overrideKey(domain string, es []rules.Entry) string {
	b := make([]byte, 0, 64)
	app := func(s string) { b = append(strconv.AppendInt(b, int64(len(s)), 10), ':'); b = append(b, s...) }
	app(domain)
	for _, e := range es {
		app(e.Key)
		app(e.Value)
	}
	return admit.LimitKey(overrideRule, string(b))
}

// descriptorVerdict is the answer for one descriptor.
type descriptorVerdict struct {
	Over bool // an enforced limit refused it (OVER_LIMIT)
	// Limit is the limit that decided (the one that frees last when refused, else the one
	// with the fewest requests left); nil when no limit applies: no rule matched, the rule
	// is unlimited, replaced, or has no admission limit (a queue-only rule).
	Limit      *rules.RateLimit
	Remaining  int64
	ResetAfter time.Duration
	// Headers asks for rate-limit response headers over gRPC (the rule's
	// response_headers, or -grpc-response-headers for every rule).
	Headers bool
}

// checkVerdict is the answer for a whole check request.
type checkVerdict struct {
	Over     bool // overall OVER_LIMIT: the worst of the descriptors
	Statuses []descriptorVerdict
	// RateLimit is what the rate-limit headers say: the tightest policy of the request
	// (a refusal first, the longest wait; else the fewest requests left). nil when no
	// limit applied to any descriptor.
	RateLimit *httpx.RateLimit
	// HeaderRule reports whether a descriptor whose rule asks for headers was decided.
	HeaderRule bool
}

var (
	// errLimitsInvalid: a rule's limits were refused by the limiter (a bug in validation).
	errLimitsInvalid = errors.New("ingress: the rule's limits are invalid")
	// errLimiterDown: the limiter store could not decide (Redis unreachable and no
	// degraded fallback).
	errLimiterDown = errors.New("ingress: the limiter store is unreachable")
)

// decide checks every descriptor against the rules in force and counts the hits of those
// that pass, exactly like envoyproxy/ratelimit: each descriptor is decided on its own
// (a refusal of one does not undo the count of another), the overall code is the worst.
// A rule that queues (POST /v1/messages) is checked by its admission limit alone, the same
// counter its admissions use; nothing is queued or parked. An unknown domain or a
// descriptor no rule matches is OK with no limit.
func (s *Server) decide(ctx context.Context, transport, domain string, descs []checkDescriptor) (checkVerdict, error) {
	now := s.cfg.Now()
	entries := make([][]rules.Entry, len(descs))
	for i := range descs {
		entries[i] = descs[i].Entries
	}
	v := checkVerdict{Statuses: make([]descriptorVerdict, len(descs))}
	for i, cr := range s.cfg.Rules().Check(domain, entries) {
		rule, key := cr.Rule, ""
		switch {
		case descs[i].Override != nil && s.cfg.Limits != nil:
			rule = &rules.Rule{Name: overrideRule, RateLimits: []rules.RateLimit{*descs[i].Override}}
			key = overrideKey(domain, descs[i].Entries)
		case !cr.Applies() || len(cr.Rule.RateLimits) == 0 || s.cfg.Limits == nil:
			if cr.Rule != nil && cr.Rule.Unlimited {
				// envoy: an unlimited descriptor is OK with limit_remaining at MaxUint32,
				// so a client can tell it from a descriptor no rule knows.
				v.Statuses[i].Remaining = math.MaxUint32
			}
			if cr.Rule != nil {
				s.metrics.checks.WithLabelValues(cr.Rule.Name, codeOK, transport).Inc()
			}
			continue
		default:
			key = admit.LimitKey(rule.Name, cr.Key)
		}
		res, blocked := blockedResult(rule, now)
		var err error
		if !blocked {
			res, err = s.cfg.Limits.Allow(ctx, key, admit.Limits(rule), descs[i].Hits, now)
		}
		if err != nil {
			if errors.Is(err, bucket.ErrInvalid) {
				return v, errors.Join(errLimitsInvalid, err)
			}
			return v, errors.Join(errLimiterDown, err)
		}
		d := res.Decision()
		lim := &rule.RateLimits[0]
		if res.Index >= 0 && res.Index < len(rule.RateLimits) {
			lim = &rule.RateLimits[res.Index]
		}
		st := descriptorVerdict{Limit: lim, Remaining: d.Remaining, ResetAfter: d.ResetAfter.Truncate(time.Millisecond),
			Headers: rule.ResponseHeaders || s.cfg.GRPCResponseHeaders}
		v.HeaderRule = v.HeaderRule || st.Headers
		code := codeOK
		if !res.Allowed {
			st.Over, v.Over = true, true
			code = codeOverLimit
		} else if res.ShadowDenied {
			code = codeShadowOverLimit
		}
		s.metrics.checks.WithLabelValues(rule.Name, code, transport).Inc()
		v.Statuses[i] = st

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
		if h := v.RateLimit; h == nil || rl.RetryAfter > h.RetryAfter || (h.RetryAfter == 0 && rl.RetryAfter == 0 && rl.Remaining < h.Remaining) {
			v.RateLimit = &rl
		}
	}
	return v, nil
}

// blockedResult answers for a rule with envoy's `requests_per_unit: 0` (a limit that
// refuses everything, such as a blocked address) without asking the store, which has no
// such limit: refused (or, in shadow mode, allowed and reported), nothing left, and the
// time to the end of the fixed window envoy would count it in. false when the rule has no
// zero limit.
func blockedResult(rule *rules.Rule, now time.Time) (bucket.Result, bool) {
	for i, l := range rule.RateLimits {
		if l.Rate.Requests != 0 || l.Rate.Interval <= 0 {
			continue
		}
		ivl := l.Rate.Interval
		rest := ivl - time.Duration(now.UnixNano()%int64(ivl))
		res := bucket.Result{Allowed: rule.ShadowMode, ShadowDenied: rule.ShadowMode, Index: i, N: min(len(rule.RateLimits), bucket.MaxLimits)}
		res.Decisions[i] = bucket.Decision{ResetAfter: rest, RetryAfter: bucket.Never, Window: ivl}
		return res, true
	}
	return bucket.Result{}, false
}
