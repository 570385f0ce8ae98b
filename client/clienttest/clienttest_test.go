package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/client/clienttest"
)

// The fake answers as the client expects a real ingress to: submissions recorded, a
// repeated idempotency key answered 200 with the first id, a full key refused 429, a
// stale If-Match refused 412, admin calls without the token 401.
func TestIngress(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, err := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken), client.WithOverLimitRetry(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	merchant := []client.Entry{{Key: "merchant_id", Value: "m-1"}}

	first, err := c.Submit(ctx, "orders", merchant, json.RawMessage(`{"n":1}`), client.WithIdempotencyKey("order-1"))
	if err != nil || first.Duplicate || first.State != client.StateQueued {
		t.Fatalf("%+v %v", first, err)
	}
	again, err := c.Submit(ctx, "orders", merchant, json.RawMessage(`{"n":1}`), client.WithIdempotencyKey("order-1"))
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("a repeated key: %+v %v", again, err)
	}
	if _, err := c.Submit(ctx, "orders", merchant, json.RawMessage(`{"n":9}`), client.WithIdempotencyKey("order-1")); !errors.Is(err, client.ErrIdempotencyKeyReused) {
		t.Fatalf("a key reused for another payload: %v", err)
	}
	other, err := c.Submit(ctx, "orders", merchant, json.RawMessage(`{"n":2}`))
	if err != nil || other.ID == first.ID {
		t.Fatalf("another key: %+v %v", other, err)
	}
	_, err = c.Submit(ctx, "orders", []client.Entry{{Key: "merchant_id", Value: clienttest.FullKey}}, 1)
	if !client.IsOverLimit(err) {
		t.Fatalf("a full key: %v", err)
	}
	subs := ing.Submissions()
	if len(subs) != 5 || string(subs[0].Payload) != `{"n":1}` || subs[0].IdempotencyKey != "order-1" ||
		subs[0].Descriptor[0] != (clienttest.Entry{Key: "merchant_id", Value: "m-1"}) || subs[2].ID != "" || subs[4].ID != "" {
		t.Fatalf("recorded %+v", subs)
	}

	a := c.Admin()
	q, err := a.Queue(ctx, clienttest.QueueName)
	if err != nil || q.ETag != "0" {
		t.Fatalf("%+v %v", q, err)
	}
	capacity := int64(7)
	if q, err = a.Tune(ctx, clienttest.QueueName, client.Patch{Capacity: &capacity, IfMatch: q.ETag}); err != nil || q.Capacity != 7 || q.ETag != "1" {
		t.Fatalf("%+v %v", q, err)
	}
	if _, err = a.Tune(ctx, clienttest.QueueName, client.Patch{Capacity: &capacity, IfMatch: "0"}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("a stale If-Match: %v", err)
	}
	if _, err = a.Queue(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unknown queue: %v", err)
	}
	if rules, err := a.Rules(ctx); err != nil || len(rules) != 1 || rules[0].Name != clienttest.QueueName {
		t.Fatalf("%+v %v", rules, err)
	}
	anonymous, _ := client.New(ing.URL)
	if _, err := anonymous.Admin().Queues(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("without the token: %v", err)
	}
}

// A test of code that submits work asserts what it submitted.
func Example() {
	ing := clienttest.NewIngress()
	defer ing.Close()

	c, err := client.New(ing.URL)
	if err != nil {
		log.Fatal(err)
	}
	// The code under test:
	if _, err := c.Submit(context.Background(), "orders", []client.Entry{{Key: "merchant_id", Value: "m-42"}}, map[string]int{"order_id": 991}); err != nil {
		log.Fatal(err)
	}

	for _, s := range ing.Submissions() {
		fmt.Println(s.Domain, s.Descriptor[0].Value, string(s.Payload))
	}
	// Output:
	// orders m-42 {"order_id":991}
}
