package drain

import (
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
)

// The small interfaces the drainer needs from other packages, and the Outcome a sink
// reports, are declared in internal/delivery, below the drainer, the sinks, retry/ and the
// ingress, so that none of those imports this runtime for them. The names stay here as
// aliases so the drainer's code reads as before.

// Sink delivers one message of a rule (delivery.Sink).
type Sink = delivery.Sink

// Verdict is the kind of a delivery Outcome (delivery.Verdict).
type Verdict = delivery.Verdict

// The verdicts (delivery.Delivered, delivery.Retry, delivery.Dead).
const (
	Delivered = delivery.Delivered
	Retry     = delivery.Retry
	Dead      = delivery.Dead
)

// ReasonExpired is the dead-letter reason of a message found past its expiry
// (delivery.ReasonExpired).
const ReasonExpired = delivery.ReasonExpired

// outcomeExpired counts, in sluice_deliveries_total{outcome}, the messages found expired.
const outcomeExpired = "expired"

// Outcome is the result of one delivery attempt (delivery.Outcome).
type Outcome = delivery.Outcome

// OutcomeDelivered is the outcome of an accepted delivery.
func OutcomeDelivered() Outcome { return delivery.OutcomeDelivered() }

// OutcomeRetry is a transient failure; retryAfter 0 means "use the rule's backoff".
func OutcomeRetry(retryAfter time.Duration, err string) Outcome {
	return delivery.OutcomeRetry(retryAfter, err)
}

// OutcomeDead is a permanent failure.
func OutcomeDead(reason string) Outcome { return delivery.OutcomeDead(reason) }

// Retrier schedules a later delivery attempt outside its key's queue (delivery.Retrier).
type Retrier = delivery.Retrier

// DeadLetters stores a message that will not be delivered (delivery.DeadLetters).
type DeadLetters = delivery.DeadLetters

// Message states reported to a StateRecorder (delivery's).
const (
	StateDelivering = delivery.StateDelivering
	StateDelivered  = delivery.StateDelivered
	StateRetrying   = delivery.StateRetrying
	StateDead       = delivery.StateDead
)

// StateRecorder records a message's state transitions for the status API
// (delivery.StateRecorder).
type StateRecorder = delivery.StateRecorder
