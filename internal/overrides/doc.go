// Package overrides stores and distributes live operator overrides of queue rules
// (docs/http-api.md, PATCH /v1/admin/queues/{name}).
//
// # Model
//
// An Override is what an operator changed on one rule, by rule name: any of outflow,
// total_outflow, capacity and paused. A nil field means "not overridden": the rules
// file's value applies. Effective applies an Override to the rule from the rules file
// and validates the result with rules.Rule.Validate; Paused is not part of a rule and is
// read with Override.IsPaused. An override outlives changes to the rules file: editing
// the file changes the fields the override does not mention, and `{"reset":true}`
// deletes the override so the file applies again.
//
// A Patch is one PATCH request body, parsed and validated by ParsePatch. It is a JSON
// merge patch: fields it names replace the override's, fields it leaves out keep
// theirs, a field set to null drops that field's override, and `reset: true` drops the
// whole override.
//
// # Storage: a NATS KV bucket
//
// Overrides live in a JetStream key-value bucket (default "sluice_overrides"; key = rule
// name, value = the Override as JSON), not in Redis, because:
//
//   - durability: an override must survive restarts of every process. The bucket is a
//     file-storage stream on the same JetStream cluster as the queues it tunes, replicated
//     the same way (R3 in production), so it is exactly as durable as the queued messages.
//     A Redis without AOF fsync on every write can lose the last change on failover.
//   - distribution: "takes effect on every drainer within 1 s" needs push. A KV watch is
//     an ordered push consumer: a change reaches every watcher in milliseconds, and a
//     watcher that was disconnected resumes from the stream and sees every change it
//     missed. Redis pub/sub drops whatever is published while a subscriber reconnects,
//     so a drainer could keep the old outflow until the next poll.
//   - concurrency: every write is a compare-and-set on the key's revision, so two admins
//     patching the same rule at once never lose each other's fields (Store.Apply re-reads
//     and re-merges on a conflict; Patch.IfRevision gives HTTP If-Match semantics).
//   - history: the bucket keeps the last History revisions per rule (default 5), which
//     is an audit trail of recent changes for free.
//
// # Distribution: Watcher
//
// A Watcher keeps an in-memory copy of every override up to date from a KV watch. Get
// reads an immutable snapshot through an atomic pointer (no lock, no allocation), so a
// drainer may call it before every claim. Changed returns a channel that is closed at the
// next change, so a drainer sleeping until its next slot wakes up at once when an
// operator pauses a rule or changes its outflow. The watcher re-watches from scratch
// after a reconnect to NATS (a restarted server has lost the ephemeral consumer behind
// the watch) and when the watch ends, so deletes made while it was away are seen too.
//
// # Per-key overrides
//
// A KeyOverride is what an operator changed on one key of one rule (PATCH
// /v1/admin/queues/{name}/keys/{key}): its outflow and/or paused, optionally Until a time
// after which the rule's values return by themselves (an ended override reads as absent).
// They live in their own bucket (default "sluice_key_overrides", History 1), one entry
// per (rule, key) under KeyKVKey: "<rule>.k<base64url of the key>", the encoding of
// queue.KeyToken, so a key is never raw in a subject. KeyStore.ApplyKey merges a KeyPatch
// with compare-and-set as Store.Apply does; KeyStore.PutKeys writes many at once with
// pipelined publishes (the bulk form). Capacity is not overridable per key: it is the
// stream's max_msgs_per_subject, one value for every key of a rule.
//
// A KeyIndex holds them all in memory from a KV watch. Lookup(rule, key) is O(1) without
// allocation under a read lock (no copy-on-write snapshot: 10,000 bulk writes would copy a
// 100,000-entry map 10,000 times); Effective(rule, key, now) gives the key's outflow, pause
// and source ("rule", "rule override", "key override until …"). Its sweeper, in every
// process, deletes ended overrides and those of rules that left the rules set, each with a
// compare-and-set on its revision. TestKeyOverrideStorageStudy (make bench) measures the
// bytes per override.
//
// # Zero value and concurrency
//
// Store and Watcher are created with Open and NewWatcher; their zero values are not
// usable. Both are safe for concurrent use. Override and Patch are plain values.
//
// # Defaults
//
// Config: Bucket "sluice_overrides" · Replicas 1 (3 on a production cluster) · History 5 ·
// Clock time.Now · Logger discard. WatcherConfig: Backoff 100ms doubling to 5s ·
// ReconnectCheck 250ms · Resync 5m · Logger discard.
//
// # Files
//
//   - override.go: Override, what an operator changed on a rule, and Effective
//   - patch.go: Patch: the admin PATCH body, parsed and checked against its rule
//   - store.go: Store: the overrides in the NATS KV bucket, written with compare-and-set
//   - watcher.go: Watcher: every override in memory, kept current by a KV watch
//   - keys.go: KeyOverride and KeyPatch, the per-key override and its PATCH body
//   - keystore.go: KeyStore: per-key overrides in their KV bucket, one entry per (rule, key)
//   - keyindex.go: KeyIndex: every per-key override in memory, Effective, and the sweeper
//   - doc.go: this overview
package overrides
