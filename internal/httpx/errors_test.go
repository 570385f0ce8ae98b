package httpx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
