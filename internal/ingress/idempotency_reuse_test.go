package ingress_test

import (
	"testing"
)

// An idempotency key reused for another request — another payload, descriptor or domain —
// is refused with 422, not answered 200 with the first message: that answer would tell
// the caller its new work was accepted when nothing was stored. The same request again
// (whitespace aside) is still a repeat.
func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	first := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `{"n": 1}`, "idempotency_key", "order-1"))
	if first.code != 202 {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `{"n":1}`, "idempotency_key", "order-1")); r.code != 200 || r.body["id"] != first.body["id"] {
		t.Fatalf("the same request, compacted: %d %s", r.code, r.raw)
	}
	for name, body := range map[string]string{
		"payload":    submit("orders", merchant("m-1"), `{"n":2}`, "idempotency_key", "order-1"),
		"descriptor": submit("orders", merchant("m-2"), `{"n":1}`, "idempotency_key", "order-1"),
		"scheduled":  submit("orders", merchant("m-1"), `{"n":3}`, "idempotency_key", "order-1", "delay", "1h"),
	} {
		r := e.do("POST", "/v1/messages", body)
		if r.code != 422 || r.body["type"] != "https://sluice.dev/problems#idempotency-key-reused" || r.body["field"] != "idempotency_key" {
			t.Fatalf("%s: %d %s, want 422 idempotency-key-reused", name, r.code, r.raw)
		}
	}
	// Nothing was stored by the refused requests: the key's queue holds the first message only.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `{"n":4}`)); r.code != 202 || r.body["depth"] != float64(2) {
		t.Fatalf("depth after the refusals: %s", r.raw)
	}

	// A key first claimed by a scheduled message is held to its request too.
	sched := e.do("POST", "/v1/messages", submit("orders", merchant("m-3"), `{"n":5}`, "idempotency_key", "later-1", "delay", "1h"))
	if sched.code != 202 {
		t.Fatalf("scheduled: %d %s", sched.code, sched.raw)
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-3"), `{"n":5}`, "idempotency_key", "later-1", "delay", "1h")); r.code != 200 || r.body["id"] != sched.body["id"] {
		t.Fatalf("the same scheduled request: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-3"), `{"n":6}`, "idempotency_key", "later-1")); r.code != 422 {
		t.Fatalf("another request under a scheduled message's key: %d %s", r.code, r.raw)
	}
}
