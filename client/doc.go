// Package client is the Go client of a sluice ingress: submit work for deferred, rate-paced
// delivery (Submit), follow a message (Status), ask envoy-style "may this pass?" questions
// (Check), and operate queues (Admin). It uses only net/http and speaks the HTTP contract
// of docs/http-api.md (also published as api/openapi.yaml), so it works against any ingress URL.
//
//	c, err := client.New("http://localhost:8080")
//	sub, err := c.Submit(ctx, "orders", []client.Entry{{Key: "merchant_id", Value: "m-42"}}, order)
//	if client.IsOverLimit(err) { … }
//
// A Client is safe for concurrent use and holds no per-call state; make one and share it.
//
// # Errors
//
// Every error answer of the server is a *ProblemError (RFC 9457 problem details: Status,
// Type, Title, Detail, Field). A 429 — of Submit, a SubmitBatch item, Status, Cancel or
// an admin call — is an *OverLimitError (RetryAfter, Limit, Remaining, Reset, Policy,
// ViolatedPolicies) that wraps the *ProblemError. Both match the
// sentinels with errors.Is: ErrOverLimit, ErrNotFound, ErrNoRule, ErrInvalid, ErrTooLarge,
// ErrUnauthorized (401, 403), ErrForbidden (403), ErrUnavailable, ErrConflict (409),
// ErrPreconditionFailed (412), ErrIdempotencyKeyReused (422), ErrPartiallyApplied (the
// server's 500 #stored-not-applied and #partially-applied: it changed something, and
// says what).
// A request that was sent and whose outcome nothing tells — a connection reset or timed
// out once sent, an answer cut off, a proxy's 502/504 or own 503, a context that ended
// while it was out, a Submit's 2xx that cannot be read — is an *OutcomeUnknownError
// matching ErrOutcomeUnknown, with a Submit's idempotency key: it may have been done.
// A *SubmitError's and a *BatchError's text names their idempotency keys.
// Arguments the client refuses before sending (an empty queue name, a payload that is not
// JSON) match ErrInvalid too. A 429 of Check is not an error but a result whose
// OverallCode is CodeOverLimit: a check asks a question and "no" is an answer.
//
// # Idempotency
//
// Submit generates one idempotency key per call (a UUIDv7, or the one given with
// WithIdempotencyKey) and sends it on every attempt of that call, as the Idempotency-Key
// header and the idempotency_key field. The server keeps the key of an accepted
// submission (202) for 24 h: a repeat is answered 200 with the original submission,
// which Submit returns with Duplicate set. That is what makes retrying a Submit after a
// lost answer safe. A failed Submit returns a *SubmitError holding the key it used
// (IdempotencyKeyOf): submit again with WithIdempotencyKey and that key, never a new one.
//
// How soon matters. After a 503 or 502/504, or a connection lost once the request was
// sent, the message may have been stored without its key being kept: a repeat is then
// recognised only within 2 minutes of that attempt (JetStream's duplicate window,
// docs/http-api.md). Resubmit within 2 minutes of the first attempt to be sure of one
// message; later, a message that did land may be stored twice. Submit's own retries keep
// to this: once an attempt may have stored the message, it stops retrying when the next
// attempt would come more than 100 s after that one, and returns the *SubmitError saying
// so. After a 429 nothing was stored and the key is not kept, so there is no such hurry.
//
// A key reused for another request (another domain, descriptor or payload) is refused
// with ErrIdempotencyKeyReused (422) rather than answered with the first message, by an
// ingress of v0.4.0 or later (earlier ones answered 200 with the first message).
//
// # Concurrent operators
//
// Admin.Queue returns the queue's ETag; pass it as Patch.IfMatch to Admin.Tune and a queue
// changed by someone else since is refused with ErrPreconditionFailed (412) instead of
// overwritten.
//
// # Retry policy
//
// One call makes at most MaxAttempts HTTP requests (default 10, WithMaxAttempts), sleeps
// at most MaxRetryWait between them in all (default 2 min, DefaultMaxRetryWait,
// WithMaxRetryWait), and never outlives its context: if the next wait would pass either
// bound, the call returns the last answer's error at once rather than sleep into it.
// SubmitBatch is one call: its rounds and the retries of their requests share the bounds.
// Submit and SubmitBatch also stop retrying once an attempt that may have stored the
// message is 100 s old (see Idempotency).
//
// What is retried:
//   - 503 (the ingress cannot store durably), and 502/504 (a proxy in front of a restarting
//     ingress): on the idempotent calls (Submit, SubmitBatch, Status, the admin GETs,
//     Tune without IfMatch, Reset). The calls whose repeat is not harmless — Check,
//     Cancel (a repeat of a cancel that worked answers ErrNoLongerTracked, which reads as
//     "delivered"), Admin.Replay, ReplayAll, PurgeQueue, PurgeKey, and Tune with IfMatch
//     (a repeat of an applied patch is refused as someone else's change) — are retried
//     only on the ingress's own 503 problem (it did nothing), never on a 502, a 504 or a
//     proxy's 503, which may come after the request was passed on and done.
//   - 429: on Submit, SubmitBatch's items and Status, by default; never on the other
//     calls. This is the user-friendly default for a producer of deferred work: a full
//     queue frees a place every 1/outflow, so honouring
//     Retry-After paces the producer at the queue's outflow instead of failing its work.
//     WithOverLimitRetry(false) (or SubmitOverLimitRetry(false) per call) returns the
//     *OverLimitError of the first 429 at once, for callers that pass refusals on.
//     A Retry-After longer than MaxRetryAfter (default 1 min, WithMaxRetryAfter) is never
//     slept through: "your daily quota is spent" comes back to the caller at once.
//   - Transport errors (connection refused or reset, timeouts, an answer cut off): on
//     Submit and SubmitBatch (the idempotency key makes a repeat harmless, within the
//     duplicate window: see Idempotency), Status, the admin GETs, Reset, and Tune without
//     IfMatch. The other calls (above) retry only failures to connect, when nothing was
//     sent. A transport error still there after the retries matches ErrUnavailable; for a
//     call that changes something and whose request may have been sent, it matches
//     ErrOutcomeUnknown (and, after retries, ErrUnavailable too).
//   - Never: a 500 #stored-not-applied or #partially-applied (ErrPartiallyApplied): the
//     server did part of it, and a repeat would do more, or be refused as someone else's
//     change.
//   - Never: 400, 401, 403, 404, 409, 413, 415, 422 or any other 4xx, nor 500: repeating
//     them cannot succeed.
//
// No call follows a redirect: a 3xx is returned as a *ProblemError naming its Location (a
// POST turned into a GET would read as accepted, and a token must not go elsewhere).
//
// One call, every attempt and wait included, lasts at most MaxCallTime (default 3 min,
// DefaultMaxCallTime, WithMaxCallTime; 0 for none) unless its context ends sooner; without
// it, MaxAttempts × the per-request timeout (30 s) + MaxRetryWait came to 7 minutes.
//
// The wait before retry n (1-based) is max(Retry-After, J) where J is uniform in
// [0, min(Cap, Base·2^(n-1))] ("full jitter", Base 250 ms and Cap 20 s by default,
// WithBackoff). Retry-After (seconds or an HTTP-date; X-RateLimit-Retry-After or the
// problem's retry_after when absent) is a floor; the jitter spreads clients refused in
// the same second once the retries pile up.
//
// # Retries and what they may repeat
//
// A retry repeats a request whose first attempt may have been carried out. Per call, what
// that repeat can do (docs/http-api.md has the same per endpoint):
//
//   - Submit, SubmitBatch: nothing twice. Every attempt carries the call's idempotency
//     key (each item's, for a batch): a message the lost attempt stored is answered 200
//     (Duplicate) and not enqueued again — within 2 minutes of an attempt that may have
//     stored it (see Idempotency), which the retries keep to. A batch resends only the
//     items refused (429, 503), each after its own Retry-After, a queue's items in their
//     order.
//   - Status, Admin.Queues, Queue, Key, HotKeys, Dead, DeadPage, Rules: reads; nothing.
//   - Tune without IfMatch, Reset: the same values written again, as a new revision. If
//     another operator changed the queue between the two attempts, the repeat overwrites
//     that change (last writer wins): use IfMatch where that matters.
//   - Tune with IfMatch: repeated only when nothing was sent or on the ingress's 503 (it
//     changed nothing), so nothing. After a lost answer: ErrOutcomeUnknown; read the queue.
//   - Check, Cancel, Admin.Replay, ReplayAll, ReplayDead, PurgeQueue, PurgeKey: repeated
//     only when nothing was sent or on the ingress's 503, so nothing is counted, cancelled,
//     replayed or deleted twice. A repeat by hand after ErrOutcomeUnknown would: count the
//     hits again (Check), answer ErrNoLongerTracked for a cancel that worked (Cancel),
//     ErrNotFound for a replay that worked (Replay), replay further letters (ReplayAll:
//     continue with the report's Next instead), delete messages admitted since (purges).
//   - Healthy, Ready: never retried.
//
// # Connections
//
// The client's own transport keeps DefaultConcurrency (64) idle connections to the
// ingress (WithConcurrency): as many as the goroutines expected to call at once, so that
// a burst does not close and reopen them. net/http's default keeps 2: 32 goroutines
// opened 445 connections for 1,229 requests; BenchmarkConcurrentSubmit shows both
// (conns/op). With WithHTTPClient, size your transport's MaxIdleConnsPerHost.
//
// # Rate-limit headers
//
// Submission, CheckResult, ProblemError and OverLimitError carry the parsed rate-limit
// headers (RateLimit): X-RateLimit-Limit/-Remaining/-Reset/-Retry-After and the IETF
// draft-ietf-httpapi-ratelimit-headers-10 fields RateLimit-Policy and RateLimit.
// ParseRateLimit and ParseRetryAfter are exported for code that reads them elsewhere.
//
// # Testing
//
// WithClock replaces the clock and the sleep between retries, so a test of code that uses
// the client never waits. Package clienttest is a fake ingress for such tests (as river's
// rivertest): it records what was submitted and answers as the API documents. The package's own tests run against httptest servers that send
// the answers documented in docs/http-api.md, and TestSystem (system_test.go) runs the client
// against a real ingress started in-process (real NATS, Redis and a recording sink): a
// burst far beyond a queue's capacity ends with every message accepted exactly once, at
// the queue's outflow. TestLive runs against an ingress you started yourself when
// SLUICE_LIVE_URL is set (see live_test.go and testdata/live-rules.yaml).
//
// # Throughput of a producer that honours Retry-After
//
// Retry-After is whole seconds, so a producer that waits it out refills a full queue at
// most once a second: it gets min(capacity, outflow × 1 s) places a second. Give a queue
// at least a second's outflow of capacity if retrying producers are to keep it busy.
package client
