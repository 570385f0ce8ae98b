package httpx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Each constructor answers its documented status with its type; FromError finds a problem
// wrapped in an error and never leaks an unknown error's text.
func TestProblemConstructors(t *testing.T) {
	for _, c := range []struct {
		p      Problem
		status int
		typ    string
	}{
		{Invalid("domain", "required"), 400, TypeInvalidRequest},
		{UnsupportedMediaType("json only"), 415, TypeInvalidRequest},
		{PreconditionFailed("stale"), 412, TypeInvalidRequest},
		{NotFound("", "no such queue"), 404, TypeNotFound},
		{NoRule("", "none"), 404, TypeNoRule},
		{TooLarge("1 MiB"), 413, TypeTooLarge},
		{QuotaExceeded("full", 2100*time.Millisecond, "orders"), 429, TypeQuotaExceeded},
		{Unavailable("", "nats", 0), 503, TypeUnavailable},
		{Unauthorized("no token"), 401, TypeUnauthorized},
		{Forbidden("read"), 403, TypeForbidden},
		{NeverSeen("x"), 404, TypeNeverSeen},
		{NotTracked("gone", "orders", nil, ""), 404, TypeNotTracked},
		{NotCancellable("delivering", "delivering"), 409, TypeNotCancellable},
		{Internal(), 500, TypeInternal},
		{StoreFull("no room", 0), 503, TypeStoreFull},
		{NotReady("nats"), 503, TypeUnavailable},
		{IdempotencyKeyReused("used"), 422, TypeIdempotencyKeyReused},
	} {
		if c.p.Status != c.status || c.p.Type != c.typ {
			t.Errorf("%+v: want %d %s", c.p, c.status, c.typ)
		}
	}
	if q := QuotaExceeded("full", 2100*time.Millisecond, "orders"); q.RetryAfter != 3 || len(q.ViolatedPolicies) != 1 {
		t.Errorf("QuotaExceeded: retry_after %d (want 3, rounded up), policies %v", q.RetryAfter, q.ViolatedPolicies)
	}
	if u := Unavailable("", "x", 0); u.RetryAfter != 1 {
		t.Errorf("Unavailable: retry_after %d, want at least 1", u.RetryAfter)
	}

	wrapped := fmt.Errorf("admin: %w", NotFound("Unknown queue", "no queue orders"))
	if p := FromError(wrapped, time.Second); p.Status != http.StatusNotFound || p.Title != "Unknown queue" {
		t.Errorf("FromError(wrapped 404) = %+v", p)
	}
	if p := FromError(fmt.Errorf("redis: %w", context.DeadlineExceeded), 2*time.Second); p.Status != 503 || p.RetryAfter != 2 {
		t.Errorf("FromError(deadline) = %+v", p)
	}
	if p := FromError(errors.New("secret dsn redis://u:p@h"), time.Second); p.Status != 500 || p.Detail != "internal error" {
		t.Errorf("FromError(unknown) = %+v: must not carry the error's text", p)
	}
}

// written is what WriteProblem puts on the wire for p: status, Retry-After and the body.
func written(p Problem) (int, string, string) {
	rec := httptest.NewRecorder()
	WriteProblem(rec, p)
	return rec.Code, rec.Header().Get("Retry-After"), rec.Body.String()
}

// The constructors the ingress's hand-built problems moved to answer exactly what those
// literals answered: each expected answer below is the one the ingress sent before
// (status, Retry-After, and the body byte for byte), written out.
func TestProblemConstructorsAnswerWhatTheIngressSent(t *testing.T) {
	for _, c := range []struct {
		name       string
		p          Problem
		status     int
		retryAfter string
		body       string
	}{
		{"StoreFull", StoreFull("nothing was stored", 1500*time.Millisecond), 503, "2",
			`{"type":"https://sluice.dev/problems#store-full","title":"The queue store is full","status":503,"detail":"nothing was stored","retry_after":2}`},
		{"StoreFull at least 1 s", StoreFull("x", 0), 503, "1",
			`{"type":"https://sluice.dev/problems#store-full","title":"The queue store is full","status":503,"detail":"x","retry_after":1}`},
		{"IdempotencyKeyReused", IdempotencyKeyReused(`idempotency key "k" was used for another request`), 422, "",
			`{"type":"https://sluice.dev/problems#idempotency-key-reused","title":"Idempotency key reused","status":422,"detail":"idempotency key \"k\" was used for another request","field":"idempotency_key"}`},
		{"NotReady has no Retry-After", NotReady("redis: connection refused"), 503, "",
			`{"type":"https://sluice.dev/problems#unavailable","title":"Not ready","status":503,"detail":"redis: connection refused"}`},
		{"PreconditionFailed titled with the status text", PreconditionFailed("revision 4, not 3"), 412, "",
			`{"type":"https://sluice.dev/problems#invalid-request","title":"Precondition Failed","status":412,"detail":"revision 4, not 3"}`},
		{"TooLarge titled with the status text", TooLarge("the body is larger than 1048576 bytes"), 413, "",
			`{"type":"https://sluice.dev/problems#payload-too-large","title":"Request Entity Too Large","status":413,"detail":"the body is larger than 1048576 bytes"}`},
		{"Unavailable with the admin API's 1 s", Unavailable("", "nats: timeout", time.Second), 503, "1",
			`{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503,"detail":"nats: timeout","retry_after":1}`},
		{"QuotaExceeded", QuotaExceeded("full", time.Minute, "orders"), 429, "60",
			`{"type":"https://sluice.dev/problems#quota-exceeded","title":"Quota exceeded","status":429,"detail":"full","violated-policies":["orders"],"retry_after":60}`},
	} {
		status, ra, body := written(c.p)
		if status != c.status || ra != c.retryAfter || body != c.body+"\n" {
			t.Errorf("%s: answers %d, Retry-After %q,\n  %s\nwant %d, Retry-After %q,\n  %s", c.name, status, ra, body, c.status, c.retryAfter, c.body)
		}
	}
	// In a batch a problem is an item's member as it is, with no WriteProblem to fill the
	// title: the constructors must not add one where the ingress's literals had none.
	for _, p := range []Problem{PreconditionFailed("x"), TooLarge("x"), Unauthorized("x"), Forbidden("x"), Internal()} {
		if p.Title != "" {
			t.Errorf("%s: title %q, want none (the status text, filled in by WriteProblem)", p.Type, p.Title)
		}
	}
}
