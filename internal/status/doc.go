// Package status answers GET /v1/messages/{id} from where the message is, not from a record
// of its own: Redis holds per-key state only, so nothing of a message is kept anywhere once
// it has left sluice.
//
// A message id names its rule and key (queue.NewID), which is enough to look in the three
// places a message can be:
//
//   - its key's queue (queue.Queues.FindLimited — the key's subject, from the id's issue
//     time on, at most Locator.MaxRead messages per look):
//     queued; or delivering when it is the head of a key a drainer holds; or retrying when it
//     is a head that failed before (strict ordering keeps it at the head), with the
//     scheduler's per-key retry state giving attempts and last error;
//   - the retry stream (retry.Store.Find): scheduled (a later delivery time), parked (no
//     room, or the admission limit), or retrying (a delivery retry of a relaxed rule), each
//     with the time it goes back to its queue;
//   - the dead letters (retry.DeadLetters.Get): dead, with the reason and when.
//
// A message in none of them has left: it was delivered, or removed by a purge. Those two
// cannot be told apart without a per-message record. Such records are opt-in and bounded
// (Delivered: by age and count, in JetStream); without one the answer is ErrNotTracked —
// an honest "no longer tracked" — with what the id itself says (rule, key, when it was
// issued). An id that is not sluice's, or names a rule that does not exist, is ErrNeverSeen.
//
// A message moving between places (re-admitted from the retry stream, replayed from the
// dead letters) is in both for a moment, and its queue is looked at again last, so a
// lookup never misses a message that is moving into its queue.
//
// # Files
//
//   - status.go: Locator.Get: a message's state from where it is (queue, retry stream, dead
//     letters, records)
//   - cancel.go: Locator.Cancel: take back a message not delivered yet
//   - delivered.go: the opt-in delivered records (-status-keep)
//   - doc.go: this overview
package status
