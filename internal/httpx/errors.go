package httpx

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// The one mapping from what went wrong to the problem answered (docs/http-api.md "Problem
// types"): each constructor pairs a problem type with its status and default title, so a
// handler says what happened and never spells a status code or a type URI itself. A
// handler that has an error rather than a verdict calls FromError.

// Invalid is a 400 #invalid-request naming the field at fault (as BadRequest).
func Invalid(field, detail string) Problem { return BadRequest(field, detail) }

// UnsupportedMediaType is a 415 #invalid-request: the body's Content-Type is not one the
// route reads.
func UnsupportedMediaType(detail string) Problem {
	return Problem{Type: TypeInvalidRequest, Status: http.StatusUnsupportedMediaType, Title: "Unsupported media type", Detail: detail}
}

// PreconditionFailed is a 412 #invalid-request: an If-Match that is no longer current.
// Its title is the status text ("Precondition Failed"), as the admin API has always sent.
func PreconditionFailed(detail string) Problem {
	return Problem{Type: TypeInvalidRequest, Status: http.StatusPreconditionFailed, Detail: detail}
}

// NotFound is a 404 #not-found: an unknown route, queue, key or dead letter. title may
// be empty ("Not Found").
func NotFound(title, detail string) Problem {
	return Problem{Type: TypeNotFound, Status: http.StatusNotFound, Title: title, Detail: detail}
}

// NoRule is a 404 #no-matching-rule. title may be empty ("No matching rule").
func NoRule(title, detail string) Problem {
	if title == "" {
		title = "No matching rule"
	}
	return Problem{Type: TypeNoRule, Status: http.StatusNotFound, Title: title, Detail: detail}
}

// TooLarge is a 413 #payload-too-large: a body larger than -max-body, or a batch of more
// than -max-batch items (the caller sets Field "items"). Its title is the status text
// ("Request Entity Too Large"), as the ingress has always sent.
func TooLarge(detail string) Problem {
	return Problem{Type: TypeTooLarge, Status: http.StatusRequestEntityTooLarge, Detail: detail}
}

// IdempotencyKeyReused is a 422 #idempotency-key-reused naming the field idempotency_key:
// the key was first used for another request, and nothing was stored.
func IdempotencyKeyReused(detail string) Problem {
	return Problem{Type: TypeIdempotencyKeyReused, Status: http.StatusUnprocessableEntity, Title: "Idempotency key reused",
		Field: "idempotency_key", Detail: detail}
}

// QuotaExceeded is a 429 #quota-exceeded: retry after retryAfter (whole seconds, at least
// 1), naming the policies that refused.
func QuotaExceeded(detail string, retryAfter time.Duration, policies ...string) Problem {
	return Problem{Type: TypeQuotaExceeded, Status: http.StatusTooManyRequests, Title: "Quota exceeded", Detail: detail,
		ViolatedPolicies: policies, RetryAfter: Seconds(retryAfter, 1)}
}

// Unavailable is a 503 #unavailable: a store cannot answer now; retry after retryAfter
// (whole seconds, at least 1). title may be empty ("Service Unavailable").
func Unavailable(title, detail string, retryAfter time.Duration) Problem {
	return Problem{Type: TypeUnavailable, Status: http.StatusServiceUnavailable, Title: title, Detail: detail,
		RetryAfter: Seconds(retryAfter, 1)}
}

// StoreFull is a 503 #store-full: the queue store (NATS JetStream) has no room left under
// its max_store, so nothing was stored; retry after retryAfter (whole seconds, at least 1).
func StoreFull(detail string, retryAfter time.Duration) Problem {
	return Problem{Type: TypeStoreFull, Status: http.StatusServiceUnavailable, Title: "The queue store is full", Detail: detail,
		RetryAfter: Seconds(retryAfter, 1)}
}

// NotReady is a 503 #unavailable titled "Not ready" for GET /readyz: a dependency the
// process needs does not answer. It carries no Retry-After: a probe asks again on its own
// period.
func NotReady(detail string) Problem {
	return Problem{Type: TypeUnavailable, Status: http.StatusServiceUnavailable, Title: "Not ready", Detail: detail}
}

// BackendDown is a backend a process needs that does not answer (GET /readyz). /readyz
// answers with Public only — which backend — and logs Err: a backend's error text can carry
// addresses, user names and versions, and /readyz is open to anyone who reaches the port.
type BackendDown struct {
	Backend string // "NATS" or "Redis"
	Err     error
}

func (e *BackendDown) Error() string { return e.Backend + ": " + e.Err.Error() }
func (e *BackendDown) Unwrap() error { return e.Err }

// Public is what /readyz says: the backend, not its error.
func (e *BackendDown) Public() string { return e.Backend + " is not reachable" }

// PublicReadyError is what /readyz says of err: a *BackendDown's backend; of anything else,
// that a dependency (unnamed) is not reachable.
func PublicReadyError(err error) string {
	var bd *BackendDown
	if errors.As(err, &bd) {
		return bd.Public()
	}
	return "a dependency is not reachable"
}

// Unauthorized is a 401 #unauthorized (the caller also sets WWW-Authenticate).
func Unauthorized(detail string) Problem {
	return Problem{Type: TypeUnauthorized, Status: http.StatusUnauthorized, Detail: detail}
}

// Forbidden is a 403 #forbidden: a known token whose scope does not allow the call.
func Forbidden(detail string) Problem {
	return Problem{Type: TypeForbidden, Status: http.StatusForbidden, Detail: detail}
}

// NeverSeen is a 404 #never-seen: a message id sluice never issued.
func NeverSeen(detail string) Problem {
	return Problem{Type: TypeNeverSeen, Status: http.StatusNotFound, Title: "Unknown message", Detail: detail}
}

// NotTracked is a 404 #no-longer-tracked: a message that has left sluice, with what its id
// names.
func NotTracked(detail, rule string, key *string, issuedAt string) Problem {
	return Problem{Type: TypeNotTracked, Status: http.StatusNotFound, Title: "Message no longer tracked", Detail: detail,
		Rule: rule, Key: key, IssuedAt: issuedAt}
}

// NotCancellable is a 409 #not-cancellable, with the message's state.
func NotCancellable(detail, state string) Problem {
	return Problem{Type: TypeNotCancellable, Status: http.StatusConflict, Title: "Message cannot be cancelled", Detail: detail, State: state}
}

// Internal is a 500 #internal. Its detail never carries the error: that is logged, not
// sent.
func Internal() Problem {
	return Problem{Type: TypeInternal, Status: http.StatusInternalServerError, Detail: "internal error"}
}

// StoredNotApplied is a 500 #stored-not-applied: the change is stored (done says what)
// but putting it in force failed, or may have (detail says what is unknown). Not a 503:
// a 503 says "nothing was done, try again", and a client that believes it would report
// its own stored change as someone else's (a repeat under If-Match is refused with 412).
func StoredNotApplied(detail string, done map[string]any) Problem {
	return Problem{Type: TypeStoredNotApplied, Status: http.StatusInternalServerError, Title: "Stored, not applied",
		Detail: detail, Done: done}
}

// PartiallyApplied is a 500 #partially-applied: a bulk operation did what done says and
// then failed; next is the URL that continues from the last item it handled ("" when
// there is nothing left to do).
func PartiallyApplied(detail string, done map[string]any, next string) Problem {
	return Problem{Type: TypePartiallyApplied, Status: http.StatusInternalServerError, Title: "Partially applied",
		Detail: detail, Done: done, Next: next}
}

// OutcomeUnknown is a 500 #outcome-unknown: the change was sent to the store and its
// answer was lost, so it may have been made. Not a 503, which says it was not.
func OutcomeUnknown(detail string) Problem {
	return Problem{Type: TypeOutcomeUnknown, Status: http.StatusInternalServerError, Title: "Outcome unknown", Detail: detail}
}

// Error makes a Problem an error, so a function deep in a handler can return the verdict
// it reached and the handler answers it with FromError.
func (p Problem) Error() string {
	if p.Detail != "" {
		return p.Type + ": " + p.Detail
	}
	return p.Type
}

// FromError is the problem to answer for err: the Problem err wraps (errors.As), if any;
// a 503 (retry after unavailable) when err is a context deadline — a store too slow to
// answer now; otherwise Internal. Map a package's sentinel errors to problems by wrapping
// them in one where they are first seen (e.g. fmt.Errorf("%w: %w", httpx.NotFound(…), err)).
func FromError(err error, unavailable time.Duration) Problem {
	var p Problem
	switch {
	case err == nil:
		return Internal()
	case errors.As(err, &p):
		return p
	case errors.Is(err, context.DeadlineExceeded):
		return Unavailable("", err.Error(), unavailable)
	}
	return Internal()
}
