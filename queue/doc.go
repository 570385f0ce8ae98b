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
// by the time each key's next message may leave. Drainers claim due keys with one Lua
// script (claim.lua) that paces every key at its outflow and the whole rule at its
// total_outflow (GCRA, lowest-due-first, so fair) and leases each claimed key to one
// drainer; the ingress calls MarkDue after each publish; Reconcile repairs keys whose
// MarkDue was lost. A rule's scheduler state is split into partitions, each its own Redis
// hash slot, by a hash of the key (partition.go): one rule spreads over a cluster's masters.
//
// Ownership (ownership.go, own.lua) is the Redis side of the drainer's own engine: leases
// on whole ownership partitions of a rule, with fencing tokens and shares over the live
// drainers, renewed for every rule in one call; Queues.DeleteAsync deletes without waiting.
// steerstate.go keeps the steering state drainers share there: each drainer's sink breaker
// (BreakerRecord, for the admin API) and throttled keys' adaptive state for a new owner.
//
// Admission's Redis side is AdmitPipeline (admitpipeline.go): idempotency takes
// (idempotency.go) and, for the claim engine only, depth counts and due marks (pipe.go and its
// scripts), batched across concurrent admissions. Under the own engine a plain admission
// sends Redis nothing.
//
// Message is the envelope shared with retry/ and the drainer; EncodeMessage and
// DecodeMessage give its NATS wire form (payload as data, the rest in headers).
//
// Zero values: Config and SchedulerConfig are usable as zero values (defaults documented on
// each field); Queues and Scheduler must be built with NewQueues and NewScheduler. Both are
// safe for concurrent use.
package queue
