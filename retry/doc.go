// Package retry is sluice's retry queue: parked messages waiting for room in their key's
// queue, delivery retries of `ordering: relaxed` rules, the re-admitter that puts both back
// into their queues when their time comes, and the dead letters.
//
// # Streams and subjects (docs/design.md "Parking, re-admission and scheduling")
//
// The retry stream (Config.Stream, default SLUICE_RETRY) is separate from the per-rule
// queue streams because scheduling cannot be combined with DiscardNew. It has
// AllowMsgSchedules, WorkQueuePolicy retention, file storage, and is bounded by MaxMsgs and
// MaxBytes. Its subjects, with <rule> = queue.RuleToken(rule name) and <id> =
// queue.RuleToken(message id) (a uuid v7 is kept as is):
//
//	park.<rule>.<id>    one schedule per parked message (Nats-Schedule: @at <second>)
//	retry.<rule>.<id>   one schedule per delivery retry of a relaxed rule
//	ready.<rule>        where the server publishes a schedule when it fires
//
// A schedule is stored with a per-subject rollup, so a message has at most one pending
// schedule of each kind: publishing it again (a client retry, two re-admitters racing)
// replaces it instead of adding one. When it fires, the server atomically stores a copy
// of the message on ready.<rule> and purges the schedule. The copy carries all headers
// except Nats-Msg-Id, so the message id travels in queue.HeaderID (Sluice-Id). The
// re-admitter's durable pull consumer reads ready.> and acks a fired message only once
// its outcome — re-admitted, parked again, or dead — is stored, so a crash of any process
// at any point repeats a step instead of losing a message; each repeated step is
// idempotent (same Nats-Msg-Id for the re-admission, same schedule subject, same
// dead-letter subject).
//
// The dead letters (DeadConfig.Stream, default SLUICE_DEAD) are a limits-retention stream
// with subjects dead.<rule>.<id> (one dead letter per message id, by rollup), kept
// MaxAge (default 14 days).
//
// # Traps this package handles
//
//   - Nats-Schedule @at has one-second resolution and nats.go formats it with
//     time.RFC3339, which truncates: FireTime rounds up so a message never fires early.
//   - The retry stream must use DiscardOld (DiscardNew is refused with schedules), so a
//     full stream would silently drop the oldest parked messages. Park refuses with
//     ErrFull once the stream is FullAt of its limits, so the ingress answers 429 instead.
//   - One stream serves every rule, so one rule flooding it (a tenant scheduling for ever
//     more keys) would starve the others: Park and Schedule refuse a rule holding
//     Config.RuleShare of it with ErrRuleFull (also ErrFull). Its messages are counted on
//     the server (its subjects); its bytes are estimated at the stream's mean message size.
//   - Queue streams deduplicate by Nats-Msg-Id for ≥ 2 minutes. A message that was
//     already queued once (a delivery retry, a replayed dead letter) would be silently
//     dropped if re-admitted with its own id, so the re-admitter hands Admit a distinct
//     msgID per generation (see AdmitMsgID; queue.Queues.EnqueueAs publishes with it);
//     a parked message that never entered its queue keeps its id.
//   - Nothing in these streams carries a Nats-Msg-Id of the message id: the duplicate
//     window would swallow a re-park or a second dead letter of the same id.
//
// # Using it outside sluice
//
// The API is made of this package's own types and queue.Message: a Rule says what the
// retry queue needs of a rule (its name, ParkMaxAge, Relaxed ordering), a RuleLookup finds
// one by name (Rules builds one from a fixed list), and an AdmitFunc puts a fired message
// back wherever the program keeps its work. Store.Park, Schedule and ScheduleRetry take the
// rule's name. The package example runs the whole loop on an embedded NATS server.
//
// # Concurrency, zero values, defaults
//
// Store, DeadLetters, Readmitter and Collector are safe for concurrent use; build them
// with their New functions (zero values are not usable). Configs document their defaults
// and are completed by WithDefaults. Any number of re-admitters (in any number of
// drainer processes) share one durable consumer.
package retry
