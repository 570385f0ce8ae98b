// Package sink delivers messages to where a rule says they go: an HTTP endpoint
// (rules.Sink.URL) or a NATS subject (rules.Sink.NATSSubject). Every sink implements
// delivery.Sink and reports a delivery.Outcome value; a failed delivery is an expected result,
// never an error.
//
// # What the sink sees (docs/delivery.md "The request")
//
// The payload bytes exactly as submitted, with these headers (same names over HTTP and NATS):
//
//	Content-Type: application/json
//	Idempotency-Key: <message id>       same value on every attempt and after a crash
//	Sluice-Message-Id: <message id>
//	Sluice-Attempt: <n>                  1-based: the attempt in progress (m.Attempt+1)
//	Sluice-Rule: <rule name>
//	Sluice-Key: <key, url.PathEscape'd>  any UTF-8 key survives as ASCII
//	Sluice-Enqueued-At: <RFC 3339, ms>   first admission
//	Sluice-Fence: <fencing token>        the drainer's claim on the key (see HeaderFence)
//	Sluice-Signature: t=…,v2=…           HTTP only, when signing keys are configured (or, with
//	                                     the standard-webhooks scheme, webhook-id,
//	                                     webhook-timestamp, webhook-signature)
//
// # Outcomes
//
// HTTP: 2xx → Delivered. 429 and 503 → Retry after the sink's Retry-After (seconds or an
// HTTP-date, capped by HTTPConfig.MaxRetryAfter), or after the rule's backoff when absent.
// Other 4xx → Dead at once, the reason naming the status and a bounded snippet of the
// body. 5xx, timeouts and connection errors → Retry with backoff. 3xx → Dead: redirects
// are not followed, because net/http would turn a POST into a GET on 301/302/303.
//
// NATS: see NATS for the JetStream-or-core choice.
//
// # Zero values, concurrency, defaults
//
// Use NewHTTP / NewNATS; the zero values are not usable. Both are safe for concurrent use
// by any number of drainer workers and share one tuned http.Transport (keep-alive, many
// idle connections per host). Configs document their defaults and are completed by
// WithDefaults. Backoff is a pure function of (policy, attempt, random source) so tests
// are deterministic.
//
// # Files
//
//   - http.go: the HTTP sink: request, answer classes, Retry-After, its tuned transport
//   - nats.go: the NATS sink: publish to the rule's subject with the same headers
//   - multi.go: Multi: the sink a rule names (HTTP or NATS)
//   - headers.go: the header names a sink sees (docs/delivery.md "The request")
//   - signers.go: per-rule signing keys (sink.sign_keys) beside the drainer's -sign-keys
//   - doc.go: this overview
package sink
