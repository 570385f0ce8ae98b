package delivery

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// The interfaces the drainer delivers through. They are narrow so internal/sink (HTTP,
// NATS sinks), retry/ (retry stream, dead letters, through internal/retryrules) and the
// status store can implement them without importing the drainer's runtime.

// Sink delivers one message of a rule. Implementations must be safe for concurrent use:
// the drainer calls Deliver from many worker goroutines at once (never twice concurrently
// for the same key, though).
//
// Deliver must not return before it knows the outcome, and must respect ctx: a cancelled
// ctx (hard stop) is reported as a retry, and the message stays in its queue, so nothing
// is lost (at-least-once). m.Attempt is the number of attempts already made; the attempt
// in progress is m.Attempt+1 (the sink's Sluice-Attempt header is 1-based).
type Sink interface {
	Deliver(ctx context.Context, rule *rules.Rule, m queue.Message) Outcome
}

// Retrier schedules a later delivery attempt of m outside its key's queue (retry stream).
// The drainer uses it only for rules with `ordering: relaxed`; strict rules keep the
// message at the head of its key's queue instead, so later messages wait behind it.
// m.Attempt and m.LastError already describe the failed attempt. When ScheduleRetry
// returns nil the drainer deletes m from the key's queue; on error it keeps m there and
// retries in place.
type Retrier interface {
	ScheduleRetry(ctx context.Context, rule *rules.Rule, m queue.Message, at time.Time) error
}

// DeadLetters stores a message that will not be delivered (max_attempts reached, or a
// permanent sink error). When Dead returns nil the drainer deletes m from its queue; on
// error it keeps m and tries again later, so a message is never lost.
type DeadLetters interface {
	Dead(ctx context.Context, rule *rules.Rule, m queue.Message, reason string) error
}

// Message states reported to a StateRecorder (docs/http-api.md, GET /v1/messages/{id}).
const (
	StateDelivering = "delivering"
	StateDelivered  = "delivered"
	StateRetrying   = "retrying"
	StateDead       = "dead"
)

// StateRecorder records a message's state transitions for the status API. The ingress's
// status store implements it. Record is best effort: the drainer does not wait for it to
// succeed and never fails a delivery because of it, so implementations should be quick
// and log their own errors. attempt is 1-based (the attempt that produced this state).
type StateRecorder interface {
	Record(ctx context.Context, id string, state string, attempt int, lastErr string)
}
