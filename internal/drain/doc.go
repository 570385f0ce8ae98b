// Package drain is the drainer runtime: it claims due keys of every queue rule
// (queue.Scheduler, Redis), pops each claimed key's head (queue.Queues, JetStream),
// delivers it through a Sink and deletes it once the sink has accepted it (at-least-once:
// a message is deleted only after delivery, so a crash repeats a delivery — same id, same
// Idempotency-Key — and never loses one).
//
// # Pacing
//
// Per key, deliveries start in admission order and no faster than the rule's outflow; the
// rule's total_outflow caps all keys together, fairly (lowest due time first). Both are
// decided by the scheduler's claim script, so any number of drainer processes together keep
// them. A claimed key is leased to one drainer until it hands it back, so one key never has
// two deliveries in flight. Each rule has one claim loop per drainer; it claims keys up to
// Config.Lookahead before their slot and a delivery goroutine waits for the slot itself, so
// messages leave on time and a late claim does not shift a key's later slots. Keys the
// deliveries finished with are handed back in the same Redis round trip as the next claim.
// When nothing is due the loop sleeps until the earliest due time (at most Config.MaxPoll).
//
// # Failures
//
// A failed delivery is retried with exponential backoff and full jitter between the rule's
// min_backoff and max_backoff, or after the sink's Retry-After (429/503). With strict
// ordering (the default) the message stays at the head of its key's queue, its attempt
// count and last error are kept in Redis with the key, and the key's next due time moves to
// the retry time, so later messages of that key wait behind it; with `ordering: relaxed` it
// is handed to the Retrier (the retry stream) when one is configured. After max_attempts,
// or on a permanent failure, it goes to DeadLetters. Redis down: claiming pauses (one log
// line per 30 s) and resumes by itself. NATS down: pops fail and keys are retried later.
// A periodic reconcile (queue.Reconcile) schedules keys whose MarkDue was lost.
//
// # Lifecycle and concurrency
//
// New, Start(ctx), Stop. Stop is a soft stop: no more claims, in-flight deliveries finish
// (within Config.StopTimeout; then they are cancelled and stay queued). Cancelling Start's
// ctx is a hard stop. Start and Stop are safe to call twice and concurrently; a Drainer
// runs once. Config documents every default (WithDefaults, Validate).
//
// The small interfaces in sink.go (Sink, Retrier, DeadLetters, StateRecorder) are what
// other packages implement; the drainer imports none of them.
//
// # Metrics
//
// sluice_deliveries_total{rule,outcome}, sluice_queue_depth{rule} (every DepthEvery),
// sluice_outflow_rate{rule} (configured, per key), sluice_dispatch_lag_seconds{rule}
// (dispatch time − due time, 1 ms … 10 s buckets). Labels never carry a key.
package drain
