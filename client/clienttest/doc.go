// Package clienttest is a stand-in sluice ingress for the tests and examples of programs
// that use package client, as rivertest is for river: no NATS, no Redis.
//
// An Ingress is an httptest server that answers the documented HTTP API (docs/http-api.md,
// api/openapi.yaml) with the shapes a real ingress sends — problem details, rate-limit
// headers, ETags — and records what it was sent, so a test can assert what its code
// submitted:
//
//	ing := clienttest.Start(t)
//	c, _ := client.New(ing.URL,
//		client.WithAdminToken(clienttest.AdminToken),
//		client.WithOverLimitRetry(false)) // a 429 comes back at once
//	… run the code under test with c …
//	if subs := ing.Submissions(); len(subs) != 1 || subs[0].Domain != "orders" { t.Fatal(…) }
//
// The fake answers at once, but a client retries: by default a Client waits out a 429 of
// Submit (FullKey's, Retry-After 3 s plus a growing back-off, ten attempts: tens of
// seconds), and a 503. Give the client WithOverLimitRetry(false) to get the *OverLimitError
// of the first 429, or, to test code that relies on the retries, a clock that does not
// sleep, so every retry happens at once (each attempt is recorded):
//
//	client.WithClock(nil, func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
//
// What it models:
//   - One queue rule, QueueName, of domain Domain ("orders") and descriptor
//     [DescriptorKey] ("merchant_id"): a submission to another domain, or whose first
//     entry has another key, is 404 #no-matching-rule.
//   - POST /v1/messages: 202 queued (depth 4 of 100, with the rate-limit headers and
//     Location), or 202 scheduled with its eta (deliver_at/delay in the future; no rate-limit
//     headers). A descriptor whose first value is FullKey is refused 429 #quota-exceeded
//     with Retry-After 3. A repeated idempotency key answers 200 with only the first
//     message's id and its current state (no state once cancelled or purged) and Location;
//     the same key for another domain, descriptor or payload is 422
//     #idempotency-key-reused. Refused with 400 #invalid-request naming the field: unknown
//     fields, a missing domain, descriptor or payload, an Idempotency-Key header that
//     differs from idempotency_key, deliver_at with delay (expires_at with ttl), bad times,
//     and the message headers a real ingress refuses (Host, Content-*, Idempotency-Key,
//     hop-by-hop, Sluice-*, Nats-*, more than 16, over 4 KiB); a Content-Type that is not
//     JSON is 415. Message ids are bare uuids 0193a1b2-7c4d-7e5f-8a9b-…, in order (a real
//     ingress appends its rule and key tokens).
//   - Batches: a JSON array, or NDJSON (application/x-ndjson), answered 200
//     {"accepted","refused","items"} with each item's own status and fields as above
//     (a problem's field prefixed "[i]."); more than 500 items is 413; the
//     Idempotency-Key header on a batch is 400. Each item is recorded (Submission.Batch).
//   - GET /v1/messages/{id}: where the fake holds the message — queued with its position,
//     scheduled, dead (the dead letters below). An id the fake never issued is 404
//     #never-seen; a message cancelled or purged is 404 #no-longer-tracked with rule, key
//     and issued_at. DeliveredID answers delivered until the first submission is given
//     that id.
//   - DELETE /v1/messages/{id}: a queued or scheduled message is cancelled, 200 with its
//     status and "cancelled": true (Cancelled lists them); delivered or dead is 409
//     #not-cancellable with its state; otherwise 404 as for GET.
//   - POST /v1/check: every descriptor is limited to CheckLimit (5) hits per MINUTE (the
//     limit named "login", or the descriptor's own limit), counted per domain and entries
//     for the fake's whole life (ResetChecks forgets them); hits count even when refused,
//     as a fixed window does. duration_until_reset is always 42s. The answer carries
//     X-RateLimit-Limit/-Remaining/-Reset, RateLimit-Policy and RateLimit for the tightest
//     descriptor, and a 429 (OVER_LIMIT) adds Retry-After and X-RateLimit-Retry-After.
//   - GET /healthz answers ok; GET /readyz answers ready, or 503 #unavailable "Not ready"
//     after SetReady(false).
//   - /v1/admin/… needs the bearer token AdminToken (else 401). GET …/queues/{name}
//     answers the queue with an ETag; PATCH is a merge patch of outflow, total_outflow,
//     capacity and paused (null restores the rules file's value; {"reset": true} alone
//     drops them all) and answers the queue with its overridden fields and a new ETag from
//     one growing sequence, "0" again when nothing is overridden. If-Match takes "N", N or
//     *; a stale one is 412, a weak tag or anything else 400. GET …/keys?top=N lists the
//     keys of the messages the fake holds queued, deepest first; GET …/keys/{key} answers
//     depth 4 for any key; POST …/purge and DELETE …/keys/{key} answer 204 and remove the
//     queued messages (their status is then #no-longer-tracked). GET /v1/admin/dead lists
//     three dead letters (limit, after, queue as documented); POST …/dead/{id}/replay puts
//     one back (202 queued, 404 when it is not dead), POST /v1/admin/dead/replay?queue=
//     all of them, or limit of them from after ({"queue","replayed","kept","failed"}, and
//     "next" when the limit stopped it). GET /v1/admin/rules answers the
//     one queue rule. An unknown queue is 404 #not-found.
//
// What it does not model: delivery (nothing leaves a queue; depth, capacity, eta and the
// queue's counters are constants, whatever was submitted or tuned), pacing, parking
// (overflow park), expiry, submit tokens (-submit-tokens) and admin scopes (403),
// 503s other than /readyz's, /json, /metrics, /openapi.yaml, the console, and
// GET /v1/admin/whoami and /v1/admin/audit (404). For those, test against a real ingress
// (`sluice dev`, or cmd/ingress with -drain).
//
// This package is for tests and examples; production code never imports it.
package clienttest
