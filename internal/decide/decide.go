package decide

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
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

// unmatchedRule is the rule label of sluice_checks_total for a descriptor no rule matches
// (a misspelt domain lets everything through: this is where it shows).
const unmatchedRule = "_unmatched"

// Transports, the transport label of sluice_checks_total.
const (
	transportHTTP = "http"
	transportGRPC = "grpc"
)

// checkDescriptor is one descriptor of a check request, already validated.
type checkDescriptor struct {
	Entries []rules.Entry
	// Hits to count: the descriptor's own hits_addend when set (0 = check without
	// counting, as envoy), else the request's (0 counts as 1).
	Hits    int64
	OwnHits bool // the descriptor set its own hits_addend
	// Override is the descriptor's own limit (envoy's RateLimitOverride): when set it is
	// the limit, whatever the rules say, counted per domain and descriptor entries.
	Override *rules.RateLimit
	// LimitText renders Override for dynamic metadata ("" without one).
	LimitText string
}

// overrideRule names the limits of descriptors that bring their own (label of
// sluice_checks_total; the key never reaches a label).
const overrideRule = "override"

// overrideCounters names the limiter keys of limit overrides: '~' is in no rule's name, so
// no rule's counters (a rule may be named "override") can share one.
const overrideCounters = "~" + overrideRule

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
	return admit.LimitKey(overrideCounters, string(b))
}

// descriptorVerdict is the answer for one descriptor.
type descriptorVerdict struct {
	Over bool // an enforced limit refused it (OVER_LIMIT)
	// Limit is the limit that decided (the one that frees last when refused, else the one
	// with the fewest requests left); nil when no limit applies: no rule matched, the rule
	// is unlimited, replaced, or has no admission limit (a queue-only rule).
	Limit      *rules.RateLimit
	Remaining  int64
	ResetAfter time.Duration // whole seconds, as envoy's duration_until_reset
	// Headers asks for rate-limit response headers over gRPC (the rule's
	// response_headers, or -grpc-response-headers for every rule).
	Headers bool
	// Unlimited: the rule is unlimited (no part in the overall code, as envoy).
	Unlimited bool
	// Quota: the descriptor is in quota mode (its rule's quota_mode, or -quota-mode).
	Quota bool
	// Metadata is the metadata of the rule whose limit applied (nil otherwise).
	Metadata map[string]any
}

// checkVerdict is the answer for a whole check request.
type checkVerdict struct {
	// Over is the overall OVER_LIMIT, as envoy: a descriptor not in quota mode is over,
	// or every descriptor in quota mode is; never under -shadow-mode.
	Over     bool
	Statuses []descriptorVerdict
	// RateLimit is what the rate-limit headers say: the tightest policy of the request
	// (a refusal first, the longest wait; else the fewest requests left). nil when no
	// limit applied to any descriptor.
	RateLimit *httpx.RateLimit
	// HeaderRule reports whether a descriptor whose rule asks for headers was decided.
	HeaderRule bool
	// DynamicMetadata is envoy's dynamic_metadata (nil unless -response-dynamic-metadata).
	DynamicMetadata map[string]any
}

var (
	// errLimitsInvalid: a rule's limits were refused by the limiter (a bug in validation).
	errLimitsInvalid = errors.New("ingress: the rule's limits are invalid")
	// errLimiterDown: the limiter store could not decide (Redis unreachable and no
	// degraded fallback).
	errLimiterDown = errors.New("ingress: the limiter store is unreachable")
)

// countsOver reports whether rule counts hits as envoy counts a hits_addend — whatever
// the answer — in its fixed_window limits: every check rule (no queue) that does not ask
// for all_or_nothing, and every limit override. Queue rules count all-or-nothing as their
// admissions do, whether their checks share the admissions' counters (`checks: share`)
// or have their own: a check answers what a submission of as many messages would.
func countsOver(rule *rules.Rule) bool { return !rule.HasQueue() && !rule.AllOrNothing }

// decide checks every descriptor against the rules in force and counts the hits of those
// that pass, exactly like envoyproxy/ratelimit: each descriptor is decided on its own
// (a refusal of one does not undo the count of another), the overall code is the worst
// (see checkVerdict.Over for quota and shadow mode). A check rule's fixed windows count
// the hits even when refused (see countsOver). A rule that queues (POST /v1/messages) is
// checked by its admission limit alone, on counters of the checks' own unless the rule
// says `checks: share` (checkCounters); nothing is queued or parked. An unknown domain or a descriptor no rule matches is OK with no
// limit. reqHits is the request's own hits_addend (for dynamic metadata).
func (s *Service) decide(ctx context.Context, transport, domain string, reqHits uint64, descs []checkDescriptor) (checkVerdict, error) {
	now := s.cfg.Now()
	entries := make([][]rules.Entry, len(descs))
	for i := range descs {
		entries[i] = descs[i].Entries
	}
	env := s.envoy
	v := checkVerdict{Statuses: make([]descriptorVerdict, len(descs))}
	checked := s.cfg.Rules().Check(domain, entries)
	if s.cfg.Limits != nil {
		// Every override is weighed before anything is counted: a refused one refuses the
		// whole request, as a malformed one does.
		for i := range descs {
			if o := descs[i].Override; o != nil {
				if p := s.overrideAllowed(i, o, checked[i].Rule); p != nil {
					return v, &overrideRefused{problem: *p}
				}
			}
		}
	}
	for i, cr := range checked {
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
				v.Statuses[i].Unlimited = true
			}
			v.Statuses[i].Quota = env.cfg.QuotaMode
			name := unmatchedRule // no rule knows the descriptor: OK, as envoy answers, and counted
			if cr.Rule != nil {
				name = cr.Rule.Name
			}
			s.metrics.checks.WithLabelValues(name, codeOK, transport).Inc()
			continue
		}
		// The limiter's name for the counters: a queue rule's checks count on counters of
		// their own unless it says `checks: share` (checkCounters).
		counters := checkCounters(rule)
		res, blocked := blockedResult(rule, descs[i].Hits, now)
		var err error
		cached := false
		if !blocked && env.cache != nil && !rule.ShadowMode {
			var hit overLimitEntry
			if key != "" {
				hit, cached = env.cache.get(key, now)
			} else {
				// looked up without building the key's string: a cached answer allocates
				// nothing here
				var buf [128]byte
				hit, cached = cacheGet(env.cache, appendLimitKey(buf[:0], counters, cr.Key), now)
			}
			cached = cached && hit.limit < len(rule.RateLimits) && rule.RateLimits[hit.limit].Rate.Interval == hit.ivl
			if cached {
				// envoy's local cache: over until the window ends, the store not asked
				res = bucket.Result{Index: hit.limit, N: min(len(rule.RateLimits), bucket.MaxLimits)}
				res.Decisions[hit.limit] = bucket.Decision{Limit: rule.RateLimits[hit.limit].Rate.Requests,
					ResetAfter: hit.until.Sub(now), RetryAfter: hit.until.Sub(now), Window: hit.ivl}
			}
		}
		if key == "" && !cached {
			key = admit.LimitKey(counters, cr.Key)
		}
		if !blocked && !cached {
			lims := admit.Limits(rule)
			if countsOver(rule) {
				for j := range lims {
					if lims[j].Algorithm == bucket.FixedWindow || lims[j].Algorithm == "" {
						lims[j].CountOver = true
					}
				}
			}
			res, err = s.cfg.Limits.Allow(ctx, key, lims, descs[i].Hits, now)
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
		reset := d.ResetAfter
		if lim.Algorithm == rules.FixedWindow && lim.Rate.Interval > 0 {
			// envoy: the time to the end of the window, whatever is left in it
			reset = windowEnd(lim, now).Sub(now)
		}
		st := descriptorVerdict{Limit: lim, Remaining: d.Remaining, ResetAfter: wholeSeconds(reset),
			Headers: rule.ResponseHeaders || s.cfg.GRPCResponseHeaders, Quota: env.cfg.QuotaMode || rule.QuotaMode}
		if descs[i].Override == nil { // envoy: an override's limit carries no metadata
			st.Metadata = rule.Metadata
		}
		v.HeaderRule = v.HeaderRule || st.Headers
		code := codeOK
		if !res.Allowed {
			st.Over = true
			code = codeOverLimit
			if env.cache != nil && !cached && !rule.ShadowMode && countsOver(rule) && lim.Algorithm == rules.FixedWindow && res.Index >= 0 {
				env.cache.put(key, overLimitEntry{until: windowEnd(lim, now), limit: res.Index, ivl: lim.Rate.Interval})
			}
		} else if res.ShadowDenied {
			code = codeShadowOverLimit
		}
		s.metrics.checks.WithLabelValues(rule.Name, code, transport).Inc()
		if rule.DetailedMetric {
			env.countDetailed(rule.Name, descs[i].Entries, code)
		}
		v.Statuses[i] = st

		name := lim.Name
		if name == "" {
			name = rule.Name
		}
		rl := httpx.RateLimit{Policy: name, Limit: d.Limit, Remaining: d.Remaining, Reset: reset, Window: d.Window}
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
	// The overall code, as envoy: OVER_LIMIT when a descriptor not in quota mode is over,
	// or when every descriptor in quota mode is; unlimited descriptors take no part.
	failed, quota, quotaFailed := 0, 0, 0
	for _, st := range v.Statuses {
		switch {
		case st.Unlimited:
		case st.Quota:
			quota++
			if st.Over {
				quotaFailed++
			}
		case st.Over:
			failed++
		}
	}
	v.Over = failed > 0 || (quota > 0 && quota == quotaFailed)
	if v.Over && env.cfg.ShadowMode {
		v.Over = false // envoy's SHADOW_MODE: the statuses still say what was over
		s.metrics.checks.WithLabelValues("_global", codeShadowOverLimit, transport).Inc()
	}
	if !v.Over && v.RateLimit != nil && v.RateLimit.RetryAfter > 0 {
		// An answer that lets the request through (quota or shadow mode) sends no
		// Retry-After, whatever one descriptor said.
		rl := *v.RateLimit
		rl.RetryAfter = 0
		v.RateLimit = &rl
	}
	if env.cfg.ResponseDynamicMetadata {
		v.DynamicMetadata = dynamicMetadata(domain, reqHits, descs, &v)
	}
	return v, nil
}

// checkSuffix ends the limiter name of a queue rule's check counters ("marketing~check"):
// rule names are [A-Za-z0-9_-], so it is no rule's name, and no admission key starts so.
const checkSuffix = "~check"

// checkCounters is the limiter name a check of rule counts under: the rule's own name for
// a check-only rule (whose counters are the checks') and for a queue rule with
// `checks: share` (its admissions' counters); else the rule's name with checkSuffix,
// counters that no submission spends and no check can spend for submissions.
func checkCounters(rule *rules.Rule) string {
	if rule.HasQueue() && rule.Checks != rules.ChecksShare {
		return rule.Name + checkSuffix
	}
	return rule.Name
}

// overrideRefused is decide's answer to a limit override beyond its bounds: a 400 problem
// naming the descriptor's limit (gRPC: InvalidArgument), nothing counted.
type overrideRefused struct{ problem httpx.Problem }

func (e *overrideRefused) Error() string { return "ingress: " + problemText(&e.problem) }

// DefaultOverrideMaxFactor and DefaultOverrideMaxWindow are the defaults of
// -override-max-factor and -override-max-window.
const (
	DefaultOverrideMaxFactor = 10
	DefaultOverrideMaxWindow = 24 * time.Hour
)

// overrideAllowed weighs descriptor i's limit override o against rule (nil: no rule
// matched): the rule's limit_override, else -override-max-factor and
// -override-max-window. Its window may be no longer than the bound (so its counter lives
// no longer), and its rate (requests per window) no more than max_factor times the rate
// of each of the rule's limits, compared exactly in integers. A descriptor without a
// rule, or whose rule is unlimited or has no limits, has no rate to compare with: only
// the window is bounded. nil when allowed.
func (s *Service) overrideAllowed(i int, o *rules.RateLimit, rule *rules.Rule) *httpx.Problem {
	field := descriptorFields[i].at + ".limit"
	factor, window := s.cfg.OverrideMaxFactor, s.cfg.OverrideMaxWindow
	factorFrom, windowFrom := "-override-max-factor", "-override-max-window"
	if rule != nil {
		lo := rule.LimitOverride
		if lo.Refused {
			p := httpx.BadRequest(field, fmt.Sprintf("rule %q takes no limit override (its limit_override.max_factor is 0)", rule.Name))
			return &p
		}
		if lo.MaxFactor > 0 {
			factor, factorFrom = lo.MaxFactor, fmt.Sprintf("rule %q's limit_override.max_factor", rule.Name)
		}
		if lo.MaxWindow > 0 {
			window, windowFrom = lo.MaxWindow, fmt.Sprintf("rule %q's limit_override.max_window", rule.Name)
		}
	}
	if o.Rate.Interval > window {
		p := httpx.BadRequest(field, fmt.Sprintf("a window of %s is longer than %s allows (%s)", o.Rate.Interval, windowFrom, window))
		return &p
	}
	if rule == nil || rule.Unlimited {
		return nil
	}
	var lhs, rhs big.Int
	for _, l := range rule.RateLimits {
		// o.Requests / o.Interval ≤ factor × l.Requests / l.Interval, without division
		lhs.Mul(big.NewInt(o.Rate.Requests), big.NewInt(int64(l.Rate.Interval)))
		rhs.Mul(big.NewInt(factor), big.NewInt(l.Rate.Requests))
		rhs.Mul(&rhs, big.NewInt(int64(o.Rate.Interval)))
		if lhs.Cmp(&rhs) > 0 {
			p := httpx.BadRequest(field, fmt.Sprintf("%d per %s is more than %d × rule %q's %d per %s (%s)",
				o.Rate.Requests, o.Rate.Interval, factor, rule.Name, l.Rate.Requests, l.Rate.Interval, factorFrom))
			return &p
		}
	}
	return nil
}

// appendLimitKey appends admit.LimitKey(rule, key) to b (TestAppendLimitKey keeps the two
// alike).
func appendLimitKey(b []byte, rule, key string) []byte {
	return append(append(append(b, rule...), ':'), key...)
}

// windowEnd is the end of the fixed window of l that holds now: aligned to the epoch, or
// to l's time_zone (a day there may last 23 or 25 hours).
func windowEnd(l *rules.RateLimit, now time.Time) time.Time {
	if l.TimeZone == nil {
		ivl := l.Rate.Interval
		return now.Add(ivl - time.Duration(now.UnixNano()%int64(ivl)))
	}
	_, end := bucket.Limit{Interval: l.Rate.Interval, Location: l.TimeZone}.FixedWindow(now)
	return end
}

// blockedResult answers for a rule with envoy's `requests_per_unit: 0` (a limit that
// refuses everything, such as a blocked address) without asking the store, which has no
// such limit: refused (or, in shadow mode, allowed and reported), nothing left, and the
// time to the end of the fixed window envoy would count it in. A check of 0 hits passes, as
// envoy's. false when the rule has no zero limit.
func blockedResult(rule *rules.Rule, hits int64, now time.Time) (bucket.Result, bool) {
	for i, l := range rule.RateLimits {
		if l.Rate.Requests != 0 || l.Rate.Interval <= 0 {
			continue
		}
		ivl := l.Rate.Interval
		rest := windowEnd(&l, now).Sub(now)
		// envoy: over when the count after the hits passes 0, so a check of 0 hits is OK
		allowed := rule.ShadowMode || hits == 0
		res := bucket.Result{Allowed: allowed, ShadowDenied: rule.ShadowMode && hits > 0, Index: i, N: min(len(rule.RateLimits), bucket.MaxLimits)}
		res.Decisions[i] = bucket.Decision{ResetAfter: rest, RetryAfter: bucket.Never, Window: ivl}
		return res, true
	}
	return bucket.Result{}, false
}
