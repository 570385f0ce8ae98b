package decide

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
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
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"` // omitted when 1, as envoy's
}

type checkResponse struct {
	OverallCode string        `json:"overall_code"`
	Statuses    []checkStatus `json:"statuses"`
	// DynamicMetadata is envoy's dynamic_metadata (-response-dynamic-metadata only).
	DynamicMetadata map[string]any `json:"dynamic_metadata,omitempty"`
}

const (
	codeOK              = "OK"
	codeOverLimit       = "OVER_LIMIT"
	codeShadowOverLimit = "SHADOW_OVER_LIMIT" // metrics only: answered OK
)

// envoyUnit is one of envoy's RateLimitResponse.RateLimit.Unit values and its length.
type envoyUnit struct {
	name string
	d    time.Duration
}

// units are envoy's unit names, longest first, with their lengths from sluice's one units
// table (internal/rules/units.go: MONTH and YEAR as envoyproxy/ratelimit counts them). A
// unit of the rules that envoy's enum does not name is left out. Names are matched here
// exactly, upper case only: rules.UnitDuration folds case, and would take "second" (or
// "WEE\u212A", with a Kelvin sign) where POST /v1/check has always refused it.
var units = func() []envoyUnit {
	names := rules.UnitNames() // shortest first
	out := make([]envoyUnit, 0, len(names))
	for i := len(names) - 1; i >= 0; i-- {
		name := strings.ToUpper(names[i])
		if _, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[name]; !ok || name == "UNKNOWN" {
			continue
		}
		d, _ := rules.UnitDuration(names[i])
		out = append(out, envoyUnit{name, d})
	}
	return out
}()

// unitOf expresses a limit's interval as envoy does: a unit and a unit_multiplier (1 for a
// whole unit, 30 for `interval: 30s`). An interval that is not a whole number of seconds
// has no envoy unit: "UNKNOWN", 1.
func unitOf(d time.Duration) (string, uint32) {
	for _, u := range units {
		if d >= u.d && d%u.d == 0 && d/u.d <= math.MaxUint32 {
			return u.name, uint32(d / u.d)
		}
	}
	return "UNKNOWN", 1
}

// unitDuration is the length of one envoy unit; false for UNKNOWN or a name it does not know.
func unitDuration(name string) (time.Duration, bool) {
	for _, u := range units {
		if u.name == name {
			return u.d, true
		}
	}
	return 0, false
}

// overrideLimit builds the limit of a descriptor's RateLimitOverride: a fixed window, as
// envoyproxy/ratelimit counts it. field names the override in errors.
func overrideLimit(field string, requests uint64, unit string, multiplier uint64) (*rules.RateLimit, *httpx.Problem) {
	d, ok := unitDuration(unit)
	switch {
	case requests == 0 || requests > math.MaxUint32:
		p := httpx.BadRequest(field+".requests_per_unit", "must be 1 to 4294967295")
		return nil, &p
	case !ok:
		p := httpx.BadRequest(field+".unit", "must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR")
		return nil, &p
	case multiplier > 1<<20:
		p := httpx.BadRequest(field+".unit_multiplier", "must be at most 1048576")
		return nil, &p
	case max(multiplier, 1) > uint64(rules.MaxOverrideWindow/d):
		// Compared before multiplying: YEAR × 1048576 does not fit a time.Duration (it
		// wrapped around and answered 500), DAY × 106000 made counters that lived for
		// centuries. The rule (or -override-max-window) bounds it further in decide.
		p := httpx.BadRequest(field+".unit_multiplier", fmt.Sprintf("%d × %s is longer than a limit override's longest window, %s", max(multiplier, 1), unit, rules.MaxOverrideWindow))
		return nil, &p
	}
	l := &rules.RateLimit{Rate: rules.Rate{Requests: int64(requests), Interval: d * time.Duration(max(multiplier, 1))},
		Algorithm: rules.FixedWindow}
	if err := (bucket.Limit{Algorithm: bucket.FixedWindow, Rate: l.Rate.Requests, Interval: l.Rate.Interval}).Validate(); err != nil {
		// 4294967295 a day is more than the limiter counts exactly (requests × window in
		// milliseconds must stay under 2^53): refused here, not a 500 from the store.
		p := httpx.BadRequest(field+".requests_per_unit", fmt.Sprintf("%d per %s is more than the limiter can count (requests × window in milliseconds must stay below 2^53)", requests, l.Rate.Interval))
		return nil, &p
	}
	return l, nil
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

// decodeCheck reads and validates the body of POST /v1/check (and /json): the domain, the
// request's hits_addend (0 when not given) and the descriptors, or the problem to answer.
func decodeCheck(r *http.Request, body []byte) (domain string, reqHits uint64, descs []checkDescriptor, prob *httpx.Problem) {
	var req request.Check
	if p := request.CheckJSONType(r, request.CheckTypes); p != nil {
		return "", 0, nil, p
	}
	if p := request.DecodeJSON(body, &req); p != nil {
		return "", 0, nil, p
	}
	if p := req.Normalize(); p != nil {
		return "", 0, nil, p
	}
	if p := request.ValidateDomain(req.Domain); p != nil {
		return "", 0, nil, p
	}
	if len(req.Descriptors) == 0 {
		p := httpx.BadRequest("descriptors", "is required: a list of {entries: [{key, value}]}")
		return "", 0, nil, &p
	}
	if len(req.Descriptors) > request.MaxCheckDescriptors {
		p := httpx.BadRequest("descriptors", "has more than "+strconv.Itoa(request.MaxCheckDescriptors)+" descriptors")
		return "", 0, nil, &p
	}
	hits := int64(1)
	if req.HitsAddend != nil {
		if *req.HitsAddend < 0 || *req.HitsAddend > request.MaxHitsAddend {
			p := httpx.BadRequest("hits_addend", "must be 0 to "+strconv.FormatInt(request.MaxHitsAddend, 10))
			return "", 0, nil, &p
		}
		if *req.HitsAddend > 0 { // envoy: 0 counts as 1
			hits = *req.HitsAddend
		}
	}
	descs = make([]checkDescriptor, len(req.Descriptors))
	for i, d := range req.Descriptors {
		at := "descriptors[" + strconv.Itoa(i) + "]"
		if p := request.ValidateEntries(at+".entries", d.Entries); p != nil {
			return "", 0, nil, p
		}
		descs[i] = checkDescriptor{Entries: ruleEntries(d.Entries), Hits: hits}
		if d.HitsAddend != nil { // envoy: a descriptor's own hits_addend overrides the request's; 0 checks without counting
			if *d.HitsAddend > request.MaxHitsAddend {
				p := httpx.BadRequest(at+".hits_addend", "must be 0 to "+strconv.FormatInt(request.MaxHitsAddend, 10))
				return "", 0, nil, &p
			}
			descs[i].Hits, descs[i].OwnHits = int64(*d.HitsAddend), true
		}
		if d.IsNegativeHits {
			p := httpx.BadRequest(at+".is_negative_hits", "is not supported: hits can only be counted, not given back")
			return "", 0, nil, &p
		}
		if o := d.Limit; o != nil {
			var p *httpx.Problem
			if descs[i].Override, p = overrideLimit(at+".limit", o.RequestsPerUnit, o.Unit, o.UnitMultiplier); p != nil {
				return "", 0, nil, p
			}
			descs[i].LimitText = overrideText(o.RequestsPerUnit, o.Unit, o.UnitMultiplier)
		}
	}
	if req.HitsAddend != nil {
		reqHits = uint64(*req.HitsAddend)
	}
	return req.Domain, reqHits, descs, nil
}

func (s *Service) handleCheck(w http.ResponseWriter, r *http.Request) {
	allowed, ok := s.httpCheckCaller(w, r)
	if !ok {
		return
	}
	body, bp, prob := s.readBody(w, r)
	defer s.releaseBody(bp)
	if prob != nil {
		httpx.WriteProblem(w, *prob)
		return
	}
	domain, reqHits, descs, p := decodeCheck(r, body)
	if p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if d := checkDomain(allowed, domain); d != nil {
		s.writeCheckDenied(w, r, d)
		return
	}
	v, err := s.decide(r.Context(), transportHTTP, domain, reqHits, descs)
	if s.writeDecideError(w, err) {
		return
	}
	resp := checkResponse{OverallCode: codeOK, Statuses: make([]checkStatus, len(v.Statuses)), DynamicMetadata: v.DynamicMetadata}
	if v.Over {
		resp.OverallCode = codeOverLimit
	}
	for i, st := range v.Statuses {
		resp.Statuses[i] = checkStatus{Code: codeOK}
		if st.Over {
			resp.Statuses[i].Code = codeOverLimit
		}
		resp.Statuses[i].LimitRemaining = st.Remaining
		if st.Limit != nil {
			unit, mult := unitOf(st.Limit.Rate.Interval)
			if mult == 1 {
				mult = 0
			}
			resp.Statuses[i].CurrentLimit = &currentLimit{Name: st.Limit.Name, RequestsPerUnit: st.Limit.Rate.Requests, Unit: unit, UnitMultiplier: mult}
			resp.Statuses[i].DurationUntilReset = protoDuration(st.ResetAfter)
		}
	}
	if v.RateLimit != nil {
		httpx.SetRateLimitHeaders(w.Header(), *v.RateLimit)
	}
	code := http.StatusOK
	if resp.OverallCode == codeOverLimit {
		code = http.StatusTooManyRequests
	}
	httpx.WriteJSON(w, code, resp)
}

// writeDecideError answers an HTTP check (/v1/check or /json) whose decision failed and
// reports whether it did: a refused limit override is the client's 400, limits the store
// cannot count are a 500, anything else the store being unreachable (503, retry in 1 s).
func (s *Service) writeDecideError(w http.ResponseWriter, err error) bool {
	var refused *overrideRefused
	switch {
	case err == nil:
		return false
	case errors.As(err, &refused):
		s.metrics.checkRefused.WithLabelValues("limit_override", transportHTTP).Inc()
		httpx.WriteProblem(w, refused.problem)
	case errors.Is(err, errLimitsInvalid):
		s.internalError(w, "", err)
	default:
		httpx.WriteProblem(w, httpx.Unavailable("", "the limiter store is unreachable", time.Second))
	}
	return true
}
