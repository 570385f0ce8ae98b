package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MessageStatus is GET /v1/messages/{id}: where one message is, read from where it is (its
// key's queue, the retry stream, the dead letters). Once delivered, a message is answered
// as delivered only where the ingress keeps delivered records (-status-keep), for that
// long; otherwise Status returns an error matching ErrNoLongerTracked.
type MessageStatus struct {
	ID       string `json:"id"`
	Domain   string `json:"domain"`
	Rule     string `json:"rule"`
	Key      string `json:"key"`
	State    string `json:"state"` // StateQueued … StateDead
	Attempts int    `json:"attempts"`
	// CreatedAt is the admission time; UpdatedAt the last state change.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// LastError is the last delivery failure, if any.
	LastError string `json:"last_error"`
	// RetryAt is when a parked message is next tried (parked only).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// DeliverAt is when a scheduled message enters its queue (scheduled only).
	DeliverAt time.Time `json:"deliver_at,omitzero"`
	// Position is how many messages of its key are ahead of it (queued only).
	Position int `json:"position,omitempty"`
	// Reason is why the message died, in the listings of Admin.Dead only (free text such
	// as "max_attempts (8) reached"; LastError has the last delivery failure).
	Reason string `json:"reason,omitempty"`
}

// Final reports whether the state can no longer change (delivered or dead).
func (s *MessageStatus) Final() bool { return s.State == StateDelivered || s.State == StateDead }

// Status returns the status of message id, or an error matching ErrNotFound when the
// server does not know it: ErrNoLongerTracked too when the message has left sluice
// (delivered or purged, with no delivered record kept). A 429 is an *OverLimitError,
// retried after its Retry-After unless WithOverLimitRetry(false).
func (c *Client) Status(ctx context.Context, id string) (*MessageStatus, error) {
	if id == "" {
		return nil, invalidf("Status: empty message id")
	}
	resp, err := c.do(ctx, call{
		method: http.MethodGet,
		path:   "/v1/messages/" + escapeSegment(id),
		conn:   anyTransient,
		retry:  retryOverLimitOrUnavailable,
		ok:     is2xx, overLim: c.retryOverLim,
	})
	if err != nil {
		return nil, err
	}
	var s MessageStatus
	if err := json.Unmarshal(resp.body, &s); err != nil {
		return nil, fmt.Errorf("sluice: GET /v1/messages/%s: %w", id, err)
	}
	return &s, nil
}

// Cancel takes back message id if it has not been delivered yet — queued, parked or waiting
// for a delivery retry — and returns its status as it was. A message being delivered,
// delivered, dead or moving back into its queue is an error matching ErrNotCancellable
// (409); one that has left sluice matches ErrNoLongerTracked, as for Status. Where the
// ingress keeps delivered records (-status-keep), a message cancelled before answers with
// State StateCancelled and no error.
//
// A cancel is retried only when it surely did not reach the ingress: a failure to connect,
// or the ingress's own 503 (it did nothing). After a request that may have been carried
// out — a connection reset or timed out once sent, an answer cut off, a proxy's 502, 503
// or 504 — its error is returned at once: a repeat of a cancel that worked would find the
// message gone (ErrNoLongerTracked), which reads as "delivered". Ask Status what became of
// the message instead. Such an error, and the ingress's own 500 #outcome-unknown (its
// delete timed out), match ErrOutcomeUnknown.
func (c *Client) Cancel(ctx context.Context, id string) (*MessageStatus, error) {
	if id == "" {
		return nil, invalidf("Cancel: empty message id")
	}
	resp, err := c.do(ctx, call{
		method:  http.MethodDelete,
		path:    "/v1/messages/" + escapeSegment(id),
		conn:    neverSent,
		retry:   retryNotDone,
		ok:      is2xx,
		mutates: true,
	})
	if err != nil {
		return nil, err
	}
	var s MessageStatus
	if err := json.Unmarshal(resp.body, &s); err != nil {
		return nil, fmt.Errorf("sluice: DELETE /v1/messages/%s: %w", id, err)
	}
	return &s, nil
}

// Codes of a check (envoy's).
const (
	CodeOK        = "OK"
	CodeOverLimit = "OVER_LIMIT"
)

// CheckResult is the answer of POST /v1/check (envoy's RateLimitResponse in its /json form).
type CheckResult struct {
	// OverallCode is CodeOK or CodeOverLimit (the worst of Statuses).
	OverallCode string `json:"overall_code"`
	// Statuses has one entry per descriptor of the request, in order.
	Statuses []DescriptorStatus `json:"statuses"`
	// RateLimit holds the rate-limit headers of the answer.
	RateLimit RateLimit `json:"-"`
}

// OK reports whether every descriptor is within its limit.
func (r *CheckResult) OK() bool { return r.OverallCode == CodeOK }

// DescriptorStatus is the decision for one descriptor of a check.
type DescriptorStatus struct {
	Code string `json:"code"` // CodeOK or CodeOverLimit
	// CurrentLimit is the limit that applied; nil when none did (no rule, or unlimited).
	CurrentLimit *CurrentLimit `json:"current_limit,omitempty"`
	// LimitRemaining is the requests left in the window after this check; 4294967295 for
	// an unlimited descriptor (as envoy), 0 for one no rule knows.
	LimitRemaining int64 `json:"limit_remaining"`
	// DurationUntilReset is until the window resets.
	DurationUntilReset time.Duration `json:"duration_until_reset"`
}

// CurrentLimit is a rule's limit as a check reports it.
type CurrentLimit struct {
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unit            string `json:"unit"` // SECOND, MINUTE, HOUR, DAY (envoy's enum), WEEK, …
	// UnitMultiplier is how many units make the window (30 for a 30-second window with
	// Unit SECOND); 1 when the server sends none.
	UnitMultiplier int64  `json:"unit_multiplier,omitempty"`
	Name           string `json:"name,omitempty"`
}

// UnmarshalJSON reads a status in the snake_case fields of docs/http-api.md and, so the client also
// works against envoy's own /json endpoint (protojson), their lowerCamelCase names;
// duration_until_reset may be a protobuf Duration string ("60s") or a number of seconds.
func (s *DescriptorStatus) UnmarshalJSON(b []byte) error {
	var v struct {
		Code          string          `json:"code"`
		CurrentLimit  *CurrentLimit   `json:"current_limit"`
		CurrentLimitC *CurrentLimit   `json:"currentLimit"`
		Remaining     json.Number     `json:"limit_remaining"`
		RemainingC    json.Number     `json:"limitRemaining"`
		Reset         json.RawMessage `json:"duration_until_reset"`
		ResetC        json.RawMessage `json:"durationUntilReset"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = DescriptorStatus{Code: v.Code, CurrentLimit: firstNonZero(v.CurrentLimit, v.CurrentLimitC)}
	rem := firstNonZero(v.Remaining, v.RemainingC)
	if rem != "" {
		n, err := strconv.ParseInt(string(rem), 10, 64)
		if err != nil {
			return fmt.Errorf("client: limit_remaining %q: %w", rem, err)
		}
		s.LimitRemaining = n
	}
	reset := v.Reset
	if len(reset) == 0 {
		reset = v.ResetC
	}
	d, err := jsonDuration(reset)
	if err != nil {
		return fmt.Errorf("client: duration_until_reset: %w", err)
	}
	s.DurationUntilReset = d
	return nil
}

// UnmarshalJSON accepts snake_case and lowerCamelCase field names (see DescriptorStatus).
func (l *CurrentLimit) UnmarshalJSON(b []byte) error {
	var v struct {
		RPU   json.Number `json:"requests_per_unit"`
		RPUC  json.Number `json:"requestsPerUnit"`
		Unit  string      `json:"unit"`
		Name  string      `json:"name"`
		Mult  json.Number `json:"unit_multiplier"`
		MultC json.Number `json:"unitMultiplier"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = CurrentLimit{Unit: v.Unit, Name: v.Name, UnitMultiplier: 1}
	if n := firstNonZero(v.Mult, v.MultC); n != "" {
		m, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || m < 1 {
			return fmt.Errorf("client: unit_multiplier %q: want a whole number ≥ 1", n)
		}
		l.UnitMultiplier = m
	}
	if n := firstNonZero(v.RPU, v.RPUC); n != "" {
		var err error
		if l.RequestsPerUnit, err = strconv.ParseInt(string(n), 10, 64); err != nil {
			return fmt.Errorf("client: requests_per_unit %q: %w", n, err)
		}
	}
	return nil
}

// UnmarshalJSON accepts overall_code and envoy's overallCode.
func (r *CheckResult) UnmarshalJSON(b []byte) error {
	var v struct {
		Code     string             `json:"overall_code"`
		CodeC    string             `json:"overallCode"`
		Statuses []DescriptorStatus `json:"statuses"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = CheckResult{OverallCode: firstNonZero(v.Code, v.CodeC), Statuses: v.Statuses}
	return nil
}

// jsonDuration reads "60s"/"1.5s" (protobuf Duration, or any Go duration), a number of
// seconds, or null/absent as zero.
func jsonDuration(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, err
	}
	if s == "" {
		return 0, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return d, nil
}

// Check asks whether the descriptors are within their limits and counts hitsAddend hits
// (0 means 1, as in envoy) against each, without queueing anything. An over-limit answer
// (HTTP 429) is a result with OverallCode CodeOverLimit, not an error. CheckDescriptors
// takes envoy's per-descriptor fields too (a hits_addend of its own, a limit override).
//
// A check counts hits, so it is retried only when it certainly was not counted: on the
// ingress's own 503 and when the connection could not be made — never after a proxy's
// 502, 503 or 504, which may have passed the check on.
func (c *Client) Check(ctx context.Context, domain string, descriptors [][]Entry, hitsAddend int) (*CheckResult, error) {
	ds := make([]CheckDescriptor, len(descriptors))
	for i, d := range descriptors {
		ds[i].Entries = d
	}
	return c.CheckDescriptors(ctx, domain, ds, hitsAddend)
}

// CheckDescriptor is one descriptor of CheckDescriptors, with envoy's per-descriptor fields.
type CheckDescriptor struct {
	Entries []Entry `json:"entries"`
	// HitsAddend, when set, is counted against this descriptor instead of the request's;
	// a HitsAddend of 0 checks without counting (a peek).
	HitsAddend *int `json:"hits_addend,omitempty"`
	// Limit, when set, replaces the matching rule's limit for this descriptor (envoy's
	// RateLimitOverride), counted in a bucket of its own.
	Limit *LimitOverride `json:"limit,omitempty"`
	// NegativeHits gives HitsAddend hits back instead of counting them (envoy's
	// is_negative_hits), e.g. to refund a request that did not happen.
	NegativeHits bool `json:"is_negative_hits,omitempty"`
}

// LimitOverride is a limit sent with a check: RequestsPerUnit per UnitMultiplier × Unit
// (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR; UnitMultiplier 0 means 1).
type LimitOverride struct {
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  int64  `json:"unit_multiplier,omitempty"`
}

// CheckDescriptors is Check with per-descriptor hits and limit overrides.
func (c *Client) CheckDescriptors(ctx context.Context, domain string, descriptors []CheckDescriptor, hitsAddend int) (*CheckResult, error) {
	if hitsAddend < 0 {
		return nil, invalidf("Check: hitsAddend %d is negative", hitsAddend)
	}
	req := struct {
		Domain      string            `json:"domain"`
		Descriptors []CheckDescriptor `json:"descriptors"`
		HitsAddend  int               `json:"hits_addend,omitempty"`
	}{Domain: domain, Descriptors: make([]CheckDescriptor, len(descriptors)), HitsAddend: hitsAddend}
	for i, d := range descriptors {
		if d.HitsAddend != nil && *d.HitsAddend < 0 {
			return nil, invalidf("Check: descriptor %d: hitsAddend %d is negative", i, *d.HitsAddend)
		}
		if d.Entries == nil {
			d.Entries = []Entry{}
		}
		req.Descriptors[i] = d
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: Check: %w", err)
	}
	resp, err := c.do(ctx, call{
		method:  http.MethodPost,
		path:    "/v1/check",
		body:    body,
		conn:    neverSent,
		retry:   retryNotDone,
		mutates: true,
		ok: func(status int) bool {
			return is2xx(status) || status == http.StatusTooManyRequests
		},
	})
	if err != nil {
		return nil, err
	}
	var r CheckResult
	if err := json.Unmarshal(resp.body, &r); err != nil || r.OverallCode == "" {
		if resp.status == http.StatusTooManyRequests {
			// A 429 without a check body (a proxy's own limit, say) is a refusal, not a result.
			return nil, c.errorFor(resp)
		}
		if err == nil {
			err = errors.New("no overall_code")
		}
		return nil, fmt.Errorf("sluice: POST /v1/check: %d answer: %w", resp.status, err)
	}
	r.RateLimit = ParseRateLimit(resp.header, c.now())
	return &r, nil
}

// firstNonZero returns a unless it is the zero value, else b.
func firstNonZero[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}
