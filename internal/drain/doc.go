// Package drain is the drainer runtime: it claims due keys of every queue rule
// (queue.Scheduler, Redis), pops each claimed key's head (queue.Queues, JetStream),
// delivers it through a Sink and deletes it once the sink has accepted it (at-least-once:
// a message is deleted only after delivery, so a crash repeats a delivery — same id, same
// Idempotency-Key — and never loses one).
//
// # Engines
//
// Config.Engine picks how drainers share keys. EngineClaim (deprecated, described below)
// claims due keys one by one from Redis. EngineOwn (the default; own.go, own_lease.go) owns whole
// ownership partitions of each rule through leases renewed in one Redis call for every rule,
// learns of work from a core NATS subscription to the rule's subjects and from the stream's
// subject list, paces keys in memory and deletes without waiting: Redis is not on the path of
// each message. docs/design.md "The own engine".
//
// # Pacing
//
// Per key, deliveries start in admission order and no faster than the rule's outflow; the
// rule's total_outflow caps all keys together, fairly (lowest due time first). Both are
// decided by the scheduler's claim script, so any number of drainer processes together keep
// them. A claimed key is leased to one drainer until it hands it back, so one key never has
// two deliveries in flight (short of a lost lease; see below). Each rule has one claim loop per drainer; it claims keys up to
// Config.Lookahead before their slot and a delivery goroutine waits for the slot itself, so
// messages leave on time and a late claim does not shift a key's later slots. Keys the
// deliveries finished with are handed back in the same Redis round trip as the next claim.
// When nothing is due the loop sleeps until the earliest due time (at most Config.MaxPoll).
//
// Slots and leases are Redis's clock: a claim returns Redis's time, and the delivery waits
// "slot − that time" on the local monotonic clock, so drainers with skewed clocks pace alike.
//
// # Leases, fencing, isolation
//
// A claim's lease is short (Config.Lease, 2.5 s) and renewed every Config.LeaseRenew by one
// call per rule for all the keys the drainer holds, so a dead drainer's keys are claimed
// again within a lease while a slow sink may take its whole timeout. Every claim carries a
// fencing token (queue.Claim.Fence) that renewals and releases must name; deliveries send it
// as Sluice-Fence. A renewal that finds a claim gone marks the key lost: it is not delivered,
// a delivery in flight is cancelled, and a failed delivery's outcome is acted on only after
// the claim is confirmed (sluice_claims_lost_total counts them). Each rule has its own
// workers (Config.Workers) and claim tokens (Config.MaxClaimed): a hung sink stalls only
// its own rule.
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
// (dispatch time − due time, 1 ms … 10 s buckets), sluice_claims_lost_total{rule}. Labels
// never carry a key.
//
// # Files
//
//   - drainer.go: the Drainer: New, Start, Stop, and the loop that claims per rule
//   - config.go: Config and its defaults; Policy, a rule's outflow now (file or live override)
//   - claim.go: claimers: take due keys within a rule's share of workers, hold and renew their
//     leases
//   - deliver.go: one claimed key's head to the sink, then release (next slot, backoff) or dead
//     letter
//   - flight.go: several deliveries of one key at once (delivery.max_in_flight > 1)
//   - own.go: the own engine (Config.Engine "own"): per rule a pacer (GCRA heap) and a worker
//     pool over the keys of owned partitions, NATS notices, async deletes
//   - own_lease.go: the own engine's ownership: one renewal for every rule, acquiring and
//     giving up partitions, deadlines before lease expiry, the repair listing
//   - own_steerstate.go: steering state shared through Redis: each drainer's sink breaker
//     published on its changes (admin API), throttled keys' adaptive state handed to a
//     partition's next owner
//   - sinkslots.go: the rule-wide cap on deliveries at the sink (sink.max_in_flight), as Redis
//     slots
//   - maintain.go: the periodic loop: depth samples and reconciling schedules with streams
//   - sink.go: the narrow interfaces the drainer needs (Sink, dead letters, statuses) and Outcome
//   - metrics.go: the drainer's Prometheus metrics
//   - signals.go: the on-call signals (time in queue, oldest age, sink answers, store use)
//   - testsignals.go: points in the drain loops tests wait on instead of sleeping (nil in
//     production)
//   - trace.go: claim and delivery spans (internal/telemetry)
//   - doc.go: this overview
package drain
