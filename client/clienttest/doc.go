// Package clienttest is a stand-in sluice ingress for the tests and examples of programs
// that use package client, as rivertest is for river: no NATS, no Redis, no sleeping.
//
// An Ingress is an httptest server that answers the documented HTTP API (api/openapi.yaml)
// with the shapes a real ingress sends — problem details, rate-limit headers, ETags — and
// records what it was sent, so a test can assert what its code submitted:
//
//	ing := clienttest.Start(t)
//	c, _ := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken))
//	… run the code under test with c …
//	if subs := ing.Submissions(); len(subs) != 1 || subs[0].Domain != "orders" { t.Fatal(…) }
//
// What it models, and what it does not:
//   - POST /v1/messages accepts every submission (202, state queued, depth 4 of 100), except
//     a descriptor whose first value is FullKey, refused 429 with Retry-After 3 as a full
//     queue is. A repeated idempotency key answers 200 with the first message's id, or 422
//     (#idempotency-key-reused) when the domain, descriptor or payload differ.
//     Nothing is ever delivered: message ids are 0193a1b2-7c4d-7e5f-8a9b-…, in order.
//   - GET /v1/messages/{id} answers delivered for any id.
//   - POST /v1/check allows 5 hits: hits_addend above 5 is over the limit (429).
//   - /v1/admin/… needs the bearer token AdminToken (else 401). One queue, QueueName: GET
//     answers it with an ETag, PATCH applies outflow, capacity and paused and honours
//     If-Match (412 when stale); GET …/keys/{key} answers depth 4; GET /v1/admin/dead
//     pages three dead letters two at a time; POST …/dead/{id}/replay answers 202 queued;
//     GET /v1/admin/rules answers the one queue rule.
//
// For the real behaviour — pacing, capacity, retries, dead letters — test against a real
// ingress (`sluice dev`, or cmd/ingress with -drain).
//
// This package is for tests and examples; production code never imports it.
package clienttest
