// Package queue holds sluice's per-key queues (the leaky bucket used as a queue) and the
// outflow scheduler that paces them.
//
// Queues is the JetStream side: one stream per queue rule, one subject per key
// (q.<rule>.<key token>, see KeyToken), bounded per key by the server itself
// (MaxMsgsPerSubject with DiscardNewPerSubject: the (capacity+1)-th message is rejected
// atomically, ErrFull). Enqueue appends, Pop reads a key's head without removing it, and
// Delete removes it after the sink accepted it (at-least-once; Delete of an already deleted
// message is ErrGone, which makes it an atomic claim on the message).
//
// Scheduler is the Redis side: per rule a sorted set of the keys that have messages, scored
// by the time each key's next message may leave, and whatever else the processes share in
// Redis. It is one type per concept, each a field of Scheduler over one client and key layout
// (the unexported store), so a caller names what it uses (sched.Ownership.Own,
// sched.Claims.MarkDue):
//
//   - Ownership (ownership.go, own.lua): the drainer's own engine: leases on whole ownership
//     partitions of a rule, with fencing tokens and shares over the live drainers, renewed for
//     every rule in one call; the pace and retry state a new owner takes over (Paces,
//     SetOwnRetry, OwnRetries); ForgetDue; the keys in flight each drainer reports with its
//     renewal (OwnRequest.ReportInFlight, ownflight.go) and their sum (InFlight).
//   - Meter (meter.lua, step.lua): slots. Reserve takes slots of a rule's total_outflow meter
//     in bulk, Step gives a claim holder its key's next slot, NextSlot reads when a key's next
//     message may leave.
//   - Claims (claim.lua, renew.lua, release.lua, …): the claim engine. Drainers Claim due keys,
//     paced at the key's outflow and the rule's total_outflow (GCRA, lowest-due-first, so
//     fair) and leased to one drainer, Renew and Release them; the ingress marks keys due
//     (MarkDue), and Reconcile repairs keys whose mark was lost. Counts.
//   - Depths: the ingress's per-key depth counters (admit.lua): SetDepth, ResetDepths,
//     Uncount, and the reads HotKeys, KeyState, DepthKey.
//   - Idempotency (idempotency.go): Take maps an idempotency key to its first message,
//     Release gives it back.
//   - SinkSlots (inflight.go, inflight.lua): a rule's deliveries in flight across drainers
//     (Acquire, Release, InFlight).
//   - Steering (steerstate.go): each drainer's sink breaker (BreakerRecord, for the admin API)
//     and throttled keys' adaptive state for a new owner.
//   - Rates (stats.go): cluster-wide counts of refusals and deliveries, and their rates.
//
// Ping, Partitions and DeleteRule concern the whole layer and are Scheduler's own. A rule's
// scheduler state is split into partitions, each its own Redis hash slot, by a hash of the key
// (partition.go): one rule spreads over a cluster's masters. Queues.DeleteAsync deletes
// without waiting.
//
// Admission's Redis side is AdmitPipeline (admitpipeline.go): idempotency takes
// (idempotency.go) and, for the claim engine only, depth counts and due marks (pipe.go and
// admit.lua), batched across concurrent admissions. The store's pipe steps it uses are
// unexported: it is the only way in. Under the own engine a plain admission sends Redis
// nothing.
//
// Message is the envelope shared with retry/ and the drainer; EncodeMessage and
// DecodeMessage give its NATS wire form (payload as data, the rest in headers).
//
// Zero values: Config and SchedulerConfig are usable as zero values (defaults documented on
// each field); Queues and Scheduler must be built with NewQueues and NewScheduler. Both are
// safe for concurrent use.
//
// # Files
//
//   - queues.go: Queues, the JetStream side: one stream per rule, Enqueue, Pop, Delete
//   - publish_batch.go: EnqueueBatch, asynchronous publishes awaiting their PubAcks
//   - puback.go: one synchronous publish and its PubAck, read without encoding/json
//   - enqueue_as.go: EnqueueAs, an explicit Nats-Msg-Id for retries put back in their queue
//   - asyncdel.go: DeleteAsync, deletes the own engine does not wait for
//   - find.go: Find, a message in its key's queue by id
//   - message.go: Message, the envelope shared with retry/ and the drainer
//   - codec.go: EncodeMessage, DecodeMessage and key checks (the NATS wire form)
//   - id.go: message ids, which say where their message lives
//   - scheduler.go: Scheduler, its concept types over the store, and the claim engine
//     (Claims, Meter.Step, Meter.NextSlot)
//   - claimparts.go: a claim of a partitioned rule, over its partitions
//   - partition.go: partitions of a rule's scheduler state; the total_outflow meter across them
//   - ownership.go: Ownership, the own engine's partition leases; Meter.Reserve
//   - ownflight.go: the drainers' reports of keys in flight sent with their renewals, and
//     Ownership.InFlight, their sum
//   - keystate.go: Depths.KeyState and Depths.Uncount
//   - pipe.go: the admission pipe steps (unexported), Depths.SetDepth and Depths.ResetDepths
//   - admitpipeline.go: AdmitPipeline, admissions batched into one pipelined round trip
//   - idempotency.go: Idempotency, idempotency keys taken and released
//   - inflight.go: SinkSlots, a rule's deliveries in flight
//   - steerstate.go: Steering, breakers and steering state
//   - stats.go: Rates, cluster-wide counts; Depths.HotKeys
//   - reconcile.go: Reconcile and CheckSchedule, repairs of the due set
//   - doc.go: this overview
package queue
