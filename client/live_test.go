package client_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/client"
)

// TestLive is a smoke test of the client against a running ingress, skipped unless
// SLUICE_LIVE_URL is set. The ingress must load testdata/live-rules.yaml:
//
//	sluice dev -rules client/testdata/live-rules.yaml -admin-token live-token &
//	SLUICE_LIVE_URL=http://127.0.0.1:8080 SLUICE_LIVE_ADMIN_TOKEN=live-token go test -run Live ./client
//
// Every run uses fresh keys, so it can be repeated against the same process (the check
// rule counts per minute: wait a minute between runs, or the check part is skipped).
func TestLive(t *testing.T) {
	base := os.Getenv("SLUICE_LIVE_URL")
	if base == "" {
		t.Skip("SLUICE_LIVE_URL not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("ingress not ready: %v", err)
	}
	run := uuid.NewString()[:8]
	key := []client.Entry{{Key: "k", Value: "live/" + run + " 🙂"}}

	t.Run("queue fills, then an honest 429", func(t *testing.T) {
		var first *client.Submission
		for i := range 5 {
			sub, err := c.Submit(ctx, "client-live", key, map[string]any{"n": i}, client.SubmitOverLimitRetry(false), client.WithDepth())
			if err == nil {
				if sub.State != client.StateQueued || sub.Capacity != 2 || sub.ID == "" || sub.Location != "/v1/messages/"+sub.ID ||
					sub.Duplicate || sub.RateLimit.Limit != 2 || sub.RateLimit.PolicyName() == "" || sub.ETA.IsZero() {
					t.Fatalf("submission %d: %+v", i, sub)
				}
				if first == nil {
					first = sub
				}
				continue
			}
			var ol *client.OverLimitError
			if !errors.As(err, &ol) {
				t.Fatalf("submission %d: %v", i, err)
			}
			if ol.RetryAfter < time.Second || ol.Limit != 2 || ol.Remaining != 0 || len(ol.ViolatedPolicies) == 0 ||
				ol.Problem.Type != client.ProblemQuotaExceeded || ol.Problem.Attempts != 1 {
				t.Fatalf("429: %+v %+v", ol, ol.Problem)
			}
			t.Logf("429 after %d submissions: %v (policy %q, reset %v)", i, err, ol.Policy, ol.Reset)

			// By default a 429 is retried, but never into the deadline: a Retry-After past
			// it returns the refusal at once.
			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := c.Submit(short, "client-live", key, 1); !client.IsOverLimit(err) || time.Since(start) > 400*time.Millisecond {
				t.Fatalf("default policy, short deadline: %v after %v", err, time.Since(start))
			}

			st, err := c.Status(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if st.ID != first.ID || st.Rule != "client-live-queue" || st.Domain != "client-live" || st.CreatedAt.IsZero() {
				t.Fatalf("status %+v", st)
			}
			return
		}
		t.Fatal("5 submissions into a queue of capacity 2 draining 1/min were all accepted")
	})

	t.Run("idempotent replay", func(t *testing.T) {
		other := []client.Entry{{Key: "k", Value: "idem-" + run}}
		a, err := c.Submit(ctx, "client-live", other, "x", client.WithIdempotencyKey("idem-"+run))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Submit(ctx, "client-live", other, "x", client.WithIdempotencyKey("idem-"+run))
		if err != nil {
			t.Fatal(err)
		}
		if a.Duplicate || !b.Duplicate || a.ID != b.ID {
			t.Fatalf("first %+v\nrepeat %+v", a, b)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		_, err := c.Submit(ctx, "no-such-domain-"+run, key, 1)
		if !errors.Is(err, client.ErrNoRule) {
			t.Fatalf("unknown domain: %v", err)
		}
		_, err = c.Submit(ctx, "client-live", []client.Entry{{Key: "k", Value: strings.Repeat("x", 300)}}, 1)
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Field == "" {
			t.Fatalf("long key: %v", err)
		}
		if _, err := c.Status(ctx, uuid.NewString()); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
		if _, err := c.Admin().Queues(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("admin without a token: %v", err)
		}
	})

	t.Run("check", func(t *testing.T) {
		who := [][]client.Entry{{{Key: "who", Value: "live-" + run}}}
		for i := range 3 {
			r, err := c.Check(ctx, "client-live-check", who, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() || r.Statuses[0].LimitRemaining != int64(2-i) || r.Statuses[0].CurrentLimit.RequestsPerUnit != 3 {
				t.Fatalf("check %d: %+v %+v", i, r, r.Statuses[0])
			}
		}
		r, err := c.Check(ctx, "client-live-check", who, 1)
		if err != nil {
			t.Fatalf("a 429 of /v1/check is a result: %v", err)
		}
		if r.OK() || r.Statuses[0].Code != client.CodeOverLimit || r.Statuses[0].DurationUntilReset <= 0 || r.RateLimit.RetryAfter < time.Second {
			t.Fatalf("4th check: %+v %+v", r, r.RateLimit)
		}
	})

	if tok := os.Getenv("SLUICE_LIVE_ADMIN_TOKEN"); tok != "" {
		t.Run("admin", func(t *testing.T) {
			a, err := client.New(base, client.WithAdminToken(tok))
			if err != nil {
				t.Fatal(err)
			}
			qs, err := a.Admin().Queues(ctx)
			if errors.Is(err, client.ErrNotFound) {
				t.Skipf("admin API not served by this ingress yet: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("queues: %+v", qs)
			k, err := a.Admin().Key(ctx, "client-live-queue", key[0].Value)
			if err != nil {
				t.Fatal(err)
			}
			if k.Depth < 1 {
				t.Fatalf("key %+v", k)
			}
		})
	}
}
