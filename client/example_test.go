package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/client/clienttest"
)

// exampleIngress stands in for a sluice ingress in the examples: clienttest.Ingress sends
// the answers the API documents, so the examples run without NATS or Redis. Point
// client.New at a real ingress ("http://localhost:8080" after `make run`) and the code is
// the same.
func exampleIngress() *clienttest.Ingress { return clienttest.NewIngress() }

func ExampleClient_Submit() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	order := map[string]any{"order_id": 991, "total": "12.50"}
	// WithDepth: the answer's depth and eta (the server reads them only when asked).
	sub, err := c.Submit(context.Background(), "orders", []client.Entry{{Key: "merchant_id", Value: "m-42"}}, order, client.WithDepth())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sub.State, sub.Depth, "of", sub.Capacity, "at", sub.Location)
	fmt.Println("places left:", sub.RateLimit.Remaining, "policy:", sub.RateLimit.PolicyName())
	// Output:
	// queued 4 of 100 at /v1/messages/0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b
	// places left: 96 policy: orders-per-merchant
}

// With over-limit retries off, a full queue comes back at once as an *OverLimitError, for
// a caller that passes the refusal on (and its Retry-After) to its own caller.
func ExampleClient_Submit_overLimit() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithOverLimitRetry(false))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Submit(context.Background(), "orders", []client.Entry{{Key: "merchant_id", Value: "m-full"}}, json.RawMessage(`{"order_id":992}`),
		client.WithIdempotencyKey("order-992"))
	var ol *client.OverLimitError
	if errors.As(err, &ol) {
		fmt.Println("over limit:", ol.ViolatedPolicies, "retry after", ol.RetryAfter, "limit", ol.Limit)
	}
	fmt.Println(client.IsOverLimit(err), errors.Is(err, client.ErrOverLimit))
	// Output:
	// over limit: [orders-per-merchant] retry after 3s limit 100
	// true true
}

func ExampleClient_Status() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(context.Background(), "0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.State, st.Final(), st.Rule, st.Key, st.UpdatedAt.Sub(st.CreatedAt))
	// Output:
	// delivered true orders-per-merchant m-42 400ms
}

// A check is a question: an over-limit answer is a result, not an error.
func ExampleClient_Check() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	login := [][]client.Entry{{{Key: "auth_type", Value: "login"}}}
	for _, hits := range []int{1, 6} {
		r, err := c.Check(context.Background(), "auth", login, hits)
		if err != nil {
			log.Fatal(err)
		}
		s := r.Statuses[0]
		fmt.Println(r.OverallCode, r.OK(), s.LimitRemaining, "of", s.CurrentLimit.RequestsPerUnit, "per", s.CurrentLimit.Unit, "reset in", s.DurationUntilReset)
	}
	// Output:
	// OK true 4 of 5 per MINUTE reset in 42s
	// OVER_LIMIT false 0 of 5 per MINUTE reset in 42s
}

// Read the queue, decide, and change it with the ETag of what was read: a change made by
// someone else in between is refused (ErrPreconditionFailed), not overwritten.
func ExampleAdmin_Tune() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a := c.Admin()
	q, err := a.Queue(ctx, "orders-per-merchant")
	if err != nil {
		log.Fatal(err)
	}
	stale := q.ETag
	q, err = a.Tune(ctx, "orders-per-merchant", client.Patch{
		Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 20},
		IfMatch: q.ETag,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Name, q.Outflow.RequestsPerUnit, "per", q.Outflow.Unit)

	// A second operator who read the queue before that change:
	paused := true
	_, err = a.Tune(ctx, "orders-per-merchant", client.Patch{Paused: &paused, IfMatch: stale})
	fmt.Println(errors.Is(err, client.ErrPreconditionFailed))
	// Output:
	// orders-per-merchant 20 per second
	// true
}

// Keys are data: any UTF-8 key, slashes and emoji included, addresses exactly its queue.
func ExampleAdmin_Key() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	k, err := c.Admin().Key(context.Background(), "orders-per-merchant", "shop/🙂 7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k.Key, k.Depth, k.NextDispatchAt.Format(time.RFC3339Nano))

	anonymous, err := client.New(srv.URL) // no admin token
	if err != nil {
		log.Fatal(err)
	}
	_, err = anonymous.Admin().Key(context.Background(), "orders-per-merchant", "m-42")
	fmt.Println(errors.Is(err, client.ErrUnauthorized))
	// Output:
	// shop/🙂 7 4 2026-11-22T05:00:00.1Z
	// true
}

// Page through a queue's dead letters and replay each (the sink had refused them; it has
// been fixed since). A replayed message keeps its id, so the sink sees the same
// Idempotency-Key.
func ExampleAdmin_DeadPage() {
	srv := exampleIngress()
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithAdminToken("example-token"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	q := client.DeadQuery{Queue: "orders-per-merchant", Limit: 2}
	for {
		page, err := c.Admin().DeadPage(ctx, q)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page.Messages {
			sub, err := c.Admin().Replay(ctx, m.ID)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(m.ID, m.Reason, "→", sub.State)
		}
		if q.After = page.Next; q.After == "" {
			break
		}
	}
	// Output:
	// 0193a1b2-0000-7000-8000-000000000001 sink answered 422 → queued
	// 0193a1b2-0000-7000-8000-000000000002 sink answered 422 → queued
	// 0193a1b2-0000-7000-8000-000000000003 sink answered 422 → queued
}
