// Package drain is the drainer runtime: a pool of workers that claim due keys of every
// queue rule (queue.Scheduler, Redis), pop the head message of each claimed key
// (queue.Queues, JetStream), deliver it through a Sink and delete it once the sink has
// accepted it (at-least-once).
//
// Per key, deliveries start in admission order and no faster than the rule's outflow;
// the rule's total_outflow caps all keys together, fairly. Both are decided by the
// scheduler's Lua script, so any number of drainer processes together keep them.
//
// A failed delivery is retried with exponential backoff and full jitter between the
// rule's min_backoff and max_backoff (or after the sink's Retry-After). With strict
// ordering (the default) the message stays at the head of its key's queue and the key's
// next due time moves to the retry time, so later messages of that key wait behind it;
// with `ordering: relaxed` it is handed to a Retrier (the retry stream) when one is
// configured. After max_attempts, or on a permanent failure, it goes to DeadLetters.
//
// The small interfaces in sink.go (Sink, Retrier, DeadLetters, StateRecorder) are what
// other packages implement; the drainer never imports them.
package drain
