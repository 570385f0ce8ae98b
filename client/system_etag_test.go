package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// Two operators read the same queue and both tune it: the second, whose read is stale,
// is refused with ErrPreconditionFailed instead of silently undoing the first's change.
// Against a real ingress, so the ETag and the 412 are sluice's own.
func TestSystemTuneIfMatch(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemRules)
	a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	alice, err := a.Queue(ctx, "even")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := a.Queue(ctx, "even")
	if err != nil {
		t.Fatal(err)
	}
	if alice.ETag == "" || alice.ETag != bob.ETag {
		t.Fatalf("ETags %q and %q", alice.ETag, bob.ETag)
	}
	tuned, err := a.Tune(ctx, "even", client.Patch{Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 5}, IfMatch: alice.ETag})
	if err != nil {
		t.Fatal(err)
	}
	if tuned.ETag == "" || tuned.ETag == alice.ETag {
		t.Fatalf("ETag after the change %q (before %q)", tuned.ETag, alice.ETag)
	}
	capacity := int64(3)
	_, err = a.Tune(ctx, "even", client.Patch{Capacity: &capacity, IfMatch: bob.ETag})
	if !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("a stale If-Match: %v, want ErrPreconditionFailed", err)
	}
	now, err := a.Queue(ctx, "even")
	if err != nil {
		t.Fatal(err)
	}
	if now.Capacity != 10 || now.Outflow == nil || now.Outflow.RequestsPerUnit != 5 || now.ETag != tuned.ETag {
		t.Fatalf("after the refused change: %+v", now)
	}

	rules, err := a.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, r := range rules {
		kinds[r.Name] = r.Kind
	}
	if kinds["even"] != "queue" || kinds["login"] != "check" || len(rules) != 4 {
		t.Fatalf("rules %+v", rules)
	}
}

// A key reused for another payload is refused by the real ingress, and the client says so
// with ErrIdempotencyKeyReused; the same payload again is still a duplicate.
func TestSystemIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemRules)
	c := sys.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := []client.Entry{{Key: "k", Value: "reuse"}}
	first, err := c.Submit(ctx, "even", k, map[string]int{"n": 1}, client.WithIdempotencyKey("job-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Submit(ctx, "even", k, map[string]int{"n": 1}, client.WithIdempotencyKey("job-1"))
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("the same request again: %+v %v", again, err)
	}
	_, err = c.Submit(ctx, "even", k, map[string]int{"n": 2}, client.WithIdempotencyKey("job-1"))
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrIdempotencyKeyReused) || !errors.As(err, &pe) || pe.Status != 422 || pe.Attempts != 1 ||
		client.IdempotencyKeyOf(err) != "job-1" {
		t.Fatalf("another payload under the key: %v", err)
	}
}
