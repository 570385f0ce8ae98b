package httpx

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// ProblemBase is the prefix of every problem type URI; the fragment names the problem.
const ProblemBase = "https://sluice.dev/problems"

// Problem is an RFC 9457 problem details object (application/problem+json).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Field names the request field at fault ("descriptor[0].value"), for 400s.
	Field string `json:"field,omitempty"`
	// ViolatedPolicies names the rules or limits that refused the request, for 429s.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds, for 429s and 503s.
	RetryAfter int64 `json:"retry_after,omitempty"`
	// Rule, Key and IssuedAt say what a message id names, for a message no longer tracked.
	Rule     string  `json:"rule,omitempty"`
	Key      *string `json:"key,omitempty"`
	IssuedAt string  `json:"issued_at,omitempty"`
	// State is a message's state, for a cancel refused with 409.
	State string `json:"state,omitempty"`
	// Done says what a request had carried out when it failed, for #stored-not-applied and
	// #partially-applied: such an answer never means "nothing happened".
	Done map[string]any `json:"done,omitempty"`
	// Next is the URL that continues a bulk operation that stopped part way, for
	// #partially-applied.
	Next string `json:"next,omitempty"`
}

// Problem types (the fragment after ProblemBase).
const (
	TypeInvalidRequest = ProblemBase + "#invalid-request"
	TypeNoRule         = ProblemBase + "#no-matching-rule"
	TypeTooLarge       = ProblemBase + "#payload-too-large"
	TypeQuotaExceeded  = ProblemBase + "#quota-exceeded"
	TypeUnavailable    = ProblemBase + "#unavailable"
	// TypeStoreFull: the queue store (NATS JetStream) has no room left; 503, at once.
	TypeStoreFull    = ProblemBase + "#store-full"
	TypeNotFound     = ProblemBase + "#not-found"
	TypeUnauthorized = ProblemBase + "#unauthorized"
	TypeInternal     = ProblemBase + "#internal"
	// A message id sluice never issued (or whose rule is not in force).
	TypeNeverSeen = ProblemBase + "#never-seen"
	// A message that has left sluice: delivered, or removed by a purge.
	TypeNotTracked = ProblemBase + "#no-longer-tracked"
	// A message that cannot be cancelled: being delivered, delivered, dead, or moving.
	TypeNotCancellable = ProblemBase + "#not-cancellable"

	// A known token whose scope does not allow the request (403).
	TypeForbidden = ProblemBase + "#forbidden"
	// An idempotency key already used for another request (422).
	TypeIdempotencyKeyReused = ProblemBase + "#idempotency-key-reused"

	// A change that is stored but could not be (or may not have been) put in force (500):
	// a Tune whose override is written and whose stream update failed. Done and the ETag
	// header say what is stored.
	TypeStoredNotApplied = ProblemBase + "#stored-not-applied"
	// A bulk operation that did part of its work and then failed (500): Done holds its
	// progress, Next the URL that continues after the last item it handled.
	TypePartiallyApplied = ProblemBase + "#partially-applied"
	// A change sent to the store whose answer was lost (500): it may have been made (a
	// cancel or a purge whose request timed out, and that could not be checked).
	TypeOutcomeUnknown = ProblemBase + "#outcome-unknown"
)

// WriteProblem writes p with its status code and Content-Type application/problem+json.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(p.RetryAfter, 10))
	}
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// BadRequest is a 400 naming the field at fault.
func BadRequest(field, detail string) Problem {
	return Problem{Type: TypeInvalidRequest, Status: http.StatusBadRequest, Title: "Invalid request", Field: field, Detail: detail}
}

// WriteJSON writes v as JSON with the status code.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Seconds rounds d up to whole seconds, at least min (Retry-After and reset headers are
// integers, and rounding down would invite a retry that is refused again).
func Seconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		return min
	}
	return s
}
