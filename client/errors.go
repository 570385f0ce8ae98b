package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors, for errors.Is. Every error answer is a *ProblemError (a 429, of any
// call, an *OverLimitError wrapping one) that matches the sentinel of its status or type. Arguments
// the client refuses before sending anything match ErrInvalid too.
var (
	// ErrOverLimit: the request was refused for its rate limit or a full queue (429).
	ErrOverLimit = errors.New("sluice: over limit")
	// ErrNotFound: the message, queue or key is unknown (404, other than ErrNoRule).
	ErrNotFound = errors.New("sluice: not found")
	// ErrNoLongerTracked: a message that has left sluice — delivered, or removed by a purge
	// — and whose delivery is not on record (the ingress keeps delivered records only with
	// -status-keep, and only that long). It matches ErrNotFound too.
	ErrNoLongerTracked = errors.New("sluice: message no longer tracked")
	// ErrNotCancellable: Cancel of a message being delivered, delivered, dead, or moving
	// back into its queue (409).
	ErrNotCancellable = errors.New("sluice: message cannot be cancelled")
	// ErrNoRule: no rule matches the domain and descriptor of a submission (404).
	ErrNoRule = errors.New("sluice: no matching rule")
	// ErrInvalid: the server refused the request as malformed (400, 415); see ProblemError.Field.
	ErrInvalid = errors.New("sluice: invalid request")
	// ErrTooLarge: the body is larger than the ingress accepts (413).
	ErrTooLarge = errors.New("sluice: payload too large")
	// ErrUnauthorized: a call without a valid bearer token, or whose token's scope does not
	// allow it (401, 403): admin calls, and Submit/Status/Cancel under -submit-tokens. A 403
	// matches ErrForbidden too.
	ErrUnauthorized = errors.New("sluice: unauthorized")
	// ErrForbidden: a known token whose scope does not allow the call (403): a read admin
	// token that changes something, a submit token of another domain. Another token is
	// needed; the same one will never do. It matches ErrUnauthorized too (as before v0.4.0).
	ErrForbidden = errors.New("sluice: forbidden")
	// ErrUnavailable: the ingress cannot store durably now (503, or 502/504 from a proxy),
	// or could not be reached at all (connection refused or reset, timeouts, an answer cut
	// off: the transport error is wrapped, and the message says how many attempts were
	// made), still so after the retries. A call that changes something and whose request
	// may have been sent matches ErrOutcomeUnknown as well (only it, when not retried).
	ErrUnavailable = errors.New("sluice: unavailable")
	// ErrConflict: the request conflicts with the resource's state (409); ErrNotCancellable
	// is one such conflict.
	ErrConflict = errors.New("sluice: conflict")
	// ErrPreconditionFailed: a Tune whose Patch.IfMatch is no longer the queue's ETag (412):
	// someone else changed the queue since it was read. Read it again (Admin.Queue), decide
	// again, and Tune with the new ETag.
	ErrPreconditionFailed = errors.New("sluice: precondition failed")
	// ErrIdempotencyKeyReused: Submit under an idempotency key that another request (another
	// domain, descriptor or payload) used within the key's 24 h (422). Nothing was stored:
	// new work needs a new key.
	ErrIdempotencyKeyReused = errors.New("sluice: idempotency key reused for another request")
	// ErrOutcomeUnknown: the request was sent and no answer says what became of it — the
	// connection was reset or timed out once the request had left, the answer was cut off,
	// a proxy answered 502/504 (or a 503 of its own) after passing it on, the context ended
	// while the request was out, or a Submit's 2xx could not be read — or the ingress says
	// so itself (500 #outcome-unknown: a cancel whose delete timed out). It may have been
	// carried out. The error is an *OutcomeUnknownError (or that *ProblemError), with the
	// idempotency key of a Submit (resubmit with it: a stored message answers 200 with its id). Calls that are
	// not idempotent (Check, Cancel, Replay, ReplayAll, the purges, Tune with IfMatch) are
	// not repeated after such a failure: ask what happened (Status, Admin.Queue, …) instead.
	ErrOutcomeUnknown = errors.New("sluice: outcome unknown")
	// ErrPartiallyApplied: the server says it carried out part of the request before it
	// failed (500 #stored-not-applied, #partially-applied): a Tune whose override is stored
	// and whose capacity is not known to be in force (ProblemError.ETag is the stored
	// revision: Tune again with it as IfMatch), a ReplayAll that stopped part way (its
	// *ReplayReport, returned with the error, has the counts and Next). Never retried: a
	// repeat would do more than asked, or be refused as someone else's change.
	ErrPartiallyApplied = errors.New("sluice: partially applied")
)

// OutcomeUnknownError is a request that was sent and whose outcome no answer tells
// (ErrOutcomeUnknown): it may have been carried out. It wraps the cause (a transport
// error, a proxy's *ProblemError, a context error, a body that could not be read).
type OutcomeUnknownError struct {
	// Method and Path name the request ("POST", "/v1/messages").
	Method, Path string
	// IdempotencyKey is the key of a Submit (or a SubmitBatch item): submit again with it
	// to learn the outcome without enqueueing twice. Empty for the other calls.
	IdempotencyKey string
	// Attempts is the number of HTTP requests the call made.
	Attempts int
	// Err is the cause.
	Err error
}

func (e *OutcomeUnknownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice: %s %s: outcome unknown, it may have been carried out: %v", e.Method, e.Path, e.Err)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.IdempotencyKey != "" {
		fmt.Fprintf(&b, " (idempotency key %s: submit again with it to learn the outcome)", e.IdempotencyKey)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrOutcomeUnknown) hold.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the cause.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// invalidError is a request refused by the client before anything is sent (an empty
// name, a negative limit): it matches ErrInvalid, as the server's 400 would.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "client: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// invalidf returns an error matching ErrInvalid, for arguments refused locally.
func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// SubmitError is an error of Submit once the request may have been sent: it carries the
// idempotency key the call used, so the caller can submit again with
// WithIdempotencyKey(e.IdempotencyKey) and get the first message back (200, Duplicate)
// if the lost attempt was in fact accepted, instead of enqueueing it twice. After a 503,
// a 502/504 or a lost connection, that resubmission must come within 2 minutes of the
// call's first attempt (JetStream's duplicate window; see the package doc): later, a
// message that landed may be stored twice. It wraps the cause: errors.Is and errors.As
// see the *OverLimitError, *ProblemError or transport error.
type SubmitError struct {
	// IdempotencyKey is the key every attempt of the call was sent with.
	IdempotencyKey string
	// Err is the cause.
	Err error
}

// Error is the cause's text with the key, which a log line of the error alone must carry
// for the message to be resubmitted safely.
func (e *SubmitError) Error() string {
	msg := e.Err.Error()
	if e.IdempotencyKey == "" || strings.Contains(msg, e.IdempotencyKey) {
		return msg
	}
	return msg + " (idempotency key " + e.IdempotencyKey + ")"
}

// Unwrap returns the cause.
func (e *SubmitError) Unwrap() error { return e.Err }

// BatchError is the error of SubmitBatch when a request of the batch failed as a whole
// (transport error, a 503 of the batch, an unreadable answer) and its retries were used
// up, or when the context ended while waiting to send refused items again. Any item
// without a Submission may have been stored: resubmit the items with these keys
// (BatchItem.IdempotencyKey), never new ones. It wraps the cause.
type BatchError struct {
	// IdempotencyKeys holds the key of every item of the call, in the items' order.
	IdempotencyKeys []string
	// Err is the cause.
	Err error
}

func (e *BatchError) Error() string {
	const shown = 5 // a batch of 500 keys would drown the message; the field has them all
	keys := strings.Join(e.IdempotencyKeys[:min(len(e.IdempotencyKeys), shown)], ", ")
	if len(e.IdempotencyKeys) > shown {
		keys += fmt.Sprintf(", … %d more", len(e.IdempotencyKeys)-shown)
	}
	return fmt.Sprintf("%v (batch of %d: resubmit with the same idempotency keys: %s)", e.Err, len(e.IdempotencyKeys), keys)
}

// Unwrap returns the cause.
func (e *BatchError) Unwrap() error { return e.Err }

// IdempotencyKeyOf returns the idempotency key of a failed Submit, or of a failed item of
// SubmitBatch (BatchResult.Err); "" when err did not come from either, or nothing was sent.
// A *BatchError holds many keys: see its IdempotencyKeys.
func IdempotencyKeyOf(err error) string {
	var se *SubmitError
	if errors.As(err, &se) {
		return se.IdempotencyKey
	}
	var ou *OutcomeUnknownError
	if errors.As(err, &ou) {
		return ou.IdempotencyKey
	}
	return ""
}

// Problem types of docs/http-api.md (RFC 9457 "type" URIs).
const (
	ProblemBase           = "https://sluice.dev/problems"
	ProblemInvalidRequest = ProblemBase + "#invalid-request"
	ProblemNoRule         = ProblemBase + "#no-matching-rule"
	ProblemTooLarge       = ProblemBase + "#payload-too-large"
	ProblemQuotaExceeded  = ProblemBase + "#quota-exceeded"
	ProblemUnavailable    = ProblemBase + "#unavailable"
	ProblemNotFound       = ProblemBase + "#not-found"
	ProblemUnauthorized   = ProblemBase + "#unauthorized"
	ProblemInternal       = ProblemBase + "#internal"
	// ProblemNeverSeen: an id the ingress never issued (or whose rule is gone).
	ProblemNeverSeen = ProblemBase + "#never-seen"
	// ProblemNoLongerTracked: a message that has left sluice (see ErrNoLongerTracked).
	ProblemNoLongerTracked = ProblemBase + "#no-longer-tracked"
	// ProblemNotCancellable: a Cancel refused (see ErrNotCancellable).
	ProblemNotCancellable = ProblemBase + "#not-cancellable"
	// ProblemIdempotencyKeyReused: a Submit refused (see ErrIdempotencyKeyReused).
	ProblemIdempotencyKeyReused = ProblemBase + "#idempotency-key-reused"
	// ProblemForbidden: a known token without the scope (see ErrForbidden).
	ProblemForbidden = ProblemBase + "#forbidden"
	// ProblemStoredNotApplied: a change stored and not known to be in force (see
	// ErrPartiallyApplied).
	ProblemStoredNotApplied = ProblemBase + "#stored-not-applied"
	// ProblemPartiallyApplied: a bulk operation that stopped part way (see
	// ErrPartiallyApplied).
	ProblemPartiallyApplied = ProblemBase + "#partially-applied"
	// ProblemOutcomeUnknown: the ingress sent a change to its store and lost the answer
	// (see ErrOutcomeUnknown).
	ProblemOutcomeUnknown = ProblemBase + "#outcome-unknown"
)

// ProblemError is an error answer of the ingress: its RFC 9457 problem details, or, for an
// answer that is not problem+json (a proxy's HTML page), the status with Type "about:blank"
// and the start of the body as Detail.
type ProblemError struct {
	Status   int    `json:"status"`
	Type     string `json:"type"`
	Title    string `json:"title"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Field names the request field at fault ("descriptor[0].value"), on 400s.
	Field string `json:"field,omitempty"`
	// ViolatedPolicies names the rules or limits that refused the request, on 429s.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter is the Retry-After header (or the body's retry_after), on 429s and 503s.
	RetryAfter time.Duration `json:"-"`
	// RateLimit holds the rate-limit headers of the answer, when it had any.
	RateLimit RateLimit `json:"-"`
	// Attempts is the number of HTTP requests the call made before giving up.
	Attempts int `json:"-"`
	// Done says what the request carried out before it failed, on #stored-not-applied and
	// #partially-applied (ErrPartiallyApplied).
	Done map[string]any `json:"done,omitempty"`
	// Next is the URL that continues a bulk operation that stopped part way.
	Next string `json:"next,omitempty"`
	// ETag is the answer's ETag header, unquoted: on #stored-not-applied, the revision the
	// change is stored under (give it to Tune as Patch.IfMatch to apply it again).
	ETag string `json:"-"`
}

func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice: %d", e.Status)
	if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Is matches the sentinel errors by status and problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrOverLimit:
		return e.Status == http.StatusTooManyRequests
	case ErrNoRule:
		return e.Type == ProblemNoRule
	case ErrNotFound:
		return e.Status == http.StatusNotFound && e.Type != ProblemNoRule
	case ErrNotCancellable:
		return e.Status == http.StatusConflict && e.Type == ProblemNotCancellable
	case ErrNoLongerTracked:
		return e.Status == http.StatusNotFound && e.Type == ProblemNoLongerTracked
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusUnsupportedMediaType
	case ErrTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrPartiallyApplied:
		return e.Type == ProblemStoredNotApplied || e.Type == ProblemPartiallyApplied
	case ErrOutcomeUnknown:
		return e.Type == ProblemOutcomeUnknown
	case ErrUnavailable:
		return retryUnavailable(e.Status)
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrPreconditionFailed:
		return e.Status == http.StatusPreconditionFailed
	case ErrIdempotencyKeyReused:
		return e.Status == http.StatusUnprocessableEntity && e.Type == ProblemIdempotencyKeyReused
	}
	return false
}

// OverLimitError is a 429 of any call: for Submit and SubmitBatch's items, the key's queue
// is full or its admission limit is hit and the rule's overflow is reject; for Status,
// Cancel and the admin calls, a limit of the ingress (or a proxy) on requests. It wraps the *ProblemError of the answer, so
// errors.As works for both, and errors.Is(err, ErrOverLimit) holds.
type OverLimitError struct {
	// RetryAfter is how long until a submission would be accepted (Retry-After, ≥ 1 s).
	RetryAfter time.Duration
	// Limit, Remaining and Reset are X-RateLimit-Limit/-Remaining/-Reset: the capacity or
	// admission limit, the places or requests left (0 here), and until one more frees up.
	Limit     int64
	Remaining int64
	Reset     time.Duration
	// Policy is the name of the policy in RateLimit-Policy (the rule or limit name).
	Policy string
	// ViolatedPolicies is the problem's "violated-policies".
	ViolatedPolicies []string
	// RateLimit is every rate-limit header of the answer, parsed.
	RateLimit RateLimit
	// Problem is the problem details of the answer.
	Problem *ProblemError
}

func (e *OverLimitError) Error() string {
	msg := "sluice: over limit"
	if len(e.ViolatedPolicies) > 0 {
		msg += " (" + strings.Join(e.ViolatedPolicies, ", ") + ")"
	} else if e.Policy != "" {
		msg += " (" + e.Policy + ")"
	}
	if e.RetryAfter > 0 {
		msg += "; retry after " + e.RetryAfter.String()
	}
	if e.Problem != nil && e.Problem.Attempts > 1 {
		msg += fmt.Sprintf(" (after %d attempts)", e.Problem.Attempts)
	}
	return msg
}

// Is makes errors.Is(err, ErrOverLimit) hold.
func (e *OverLimitError) Is(target error) bool { return target == ErrOverLimit }

// Unwrap returns the problem details, for errors.As(err, &*ProblemError).
func (e *OverLimitError) Unwrap() error {
	if e.Problem == nil {
		return nil
	}
	return e.Problem
}

// IsOverLimit reports whether err is (or wraps) an over-limit refusal (a 429); use
// errors.As with an *OverLimitError for its details.
func IsOverLimit(err error) bool { return errors.Is(err, ErrOverLimit) }

// errorFor turns a non-success answer into a *ProblemError, or an *OverLimitError for 429.
func (c *Client) errorFor(r *response) error {
	now := c.now()
	pe := &ProblemError{Status: r.status, Attempts: r.attempts}
	ct, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	var raw struct {
		ProblemError
		RetryAfter float64 `json:"retry_after"`
	}
	if (ct == "application/problem+json" || ct == "application/json") && json.Unmarshal(r.body, &raw) == nil && (raw.Type != "" || raw.Title != "") {
		*pe = raw.ProblemError
		pe.Status = r.status // the status line wins over a body that disagrees
		pe.Attempts = r.attempts
		if raw.RetryAfter > 0 {
			pe.RetryAfter = time.Duration(raw.RetryAfter * float64(time.Second))
		}
	} else {
		pe.Type = "about:blank"
		pe.Title = http.StatusText(r.status)
		pe.Detail = snippet(r.body)
	}
	if r.status >= 300 && r.status < 400 {
		// The client follows no redirect (see New): say where it pointed, so the base URL
		// can be corrected.
		pe.Detail = "redirect to " + strconv.Quote(r.header.Get("Location")) + " not followed: give the client the ingress's own URL"
	}
	if pe.Type == "" {
		pe.Type = "about:blank"
	}
	if ra, ok := retryAfter(r.header, now); ok {
		pe.RetryAfter = ra
	}
	pe.RateLimit = ParseRateLimit(r.header, now)
	pe.ETag = etagValue(r.header.Get("ETag"))
	if r.status != http.StatusTooManyRequests {
		return pe
	}
	rl := pe.RateLimit
	ol := &OverLimitError{
		RetryAfter:       pe.RetryAfter,
		Limit:            rl.Limit,
		Remaining:        rl.Remaining,
		Reset:            rl.Reset,
		Policy:           rl.PolicyName(),
		ViolatedPolicies: pe.ViolatedPolicies,
		RateLimit:        rl,
		Problem:          pe,
	}
	if ol.RetryAfter == 0 {
		ol.RetryAfter = rl.RetryAfter
	}
	return ol
}

// snippet is the start of a non-problem body, printable, for an error message.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		b = b[:n]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
}
