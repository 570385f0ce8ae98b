// Package delivery is the model every part of a delivery shares, below all of them: what
// one attempt to hand a rule's message to its sink comes to (Outcome: delivered, retry
// later, or dead), where a message goes when it is not delivered (Retrier, the retry
// stream; DeadLetters, with a reason such as ReasonExpired), the states a message's status
// record passes through (StateRecorder), and how a rule is drained right now (Policy).
//
// The drainer runtime (internal/drain) uses these; the sinks (internal/sink), the retry
// and dead-letter streams (retry/, through internal/retryrules) and the status store
// implement them; the processes (internal/process) wire one to the other. None of them
// needs another's code for it: this package imports only the rules and the message type,
// so the public retry/ package links no drainer (internal/arch's test holds the arrows).
// internal/drain re-exports each name (drain.Outcome is delivery.Outcome).
//
// At-least-once: a message leaves its key's queue only when a sink said Delivered, the
// Retrier took it, or DeadLetters stored it; every implementation here returns an error
// (or a Retry outcome) rather than drop one.
//
// # Files
//
//   - outcome.go: Verdict and Outcome, a delivery attempt's result, and the dead-letter
//     reasons
//   - ports.go: the interfaces the drainer delivers through: Sink, Retrier, DeadLetters,
//     StateRecorder and its states
//   - policy.go: Policy, a rule's outflow and pause now (rules file or live override)
//   - doc.go: this overview
package delivery
