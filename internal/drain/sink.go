package drain

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// This file holds the small interfaces the drainer needs from other packages. They are
// deliberately narrow so internal/sink (HTTP, NATS sinks), retry/ (retry stream, dead
// letters) and the ingress status store can implement them without importing the
// drainer's runtime.

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

// Verdict is the kind of a delivery Outcome.
type Verdict int

const (
	// Delivered: the sink accepted the message (HTTP 2xx, NATS publish acknowledged).
	// The drainer deletes it from its queue.
	Delivered Verdict = iota
	// Retry: a transient failure (5xx, timeout, connection error, 429/503). The drainer
	// retries after RetryAfter if set (the sink's Retry-After), else after exponential
	// backoff with full jitter from the rule's delivery policy, until max_attempts.
	Retry
	// Dead: a permanent failure (other 4xx, invalid sink config). The message goes to the
	// dead letters at once.
	Dead
)

// ReasonExpired is the dead-letter reason of a message found past its expiry (a
// submission's ttl or expires_at, or its rule's queue.max_age) before it was delivered.
const ReasonExpired = "expired"

// outcomeExpired counts, in sluice_deliveries_total{outcome}, the messages found expired.
const outcomeExpired = "expired"

// String returns the verdict as used in metrics (sluice_deliveries_total{outcome}).
func (v Verdict) String() string {
	switch v {
	case Delivered:
		return "delivered"
	case Retry:
		return "retried"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Outcome is the result of one delivery attempt. It is a value, not an error: a failed
// delivery is a normal, expected result.
type Outcome struct {
	Verdict Verdict
	// RetryAfter is the sink's requested delay (429/503 Retry-After); 0 = use backoff.
	// Only meaningful with Retry.
	RetryAfter time.Duration
	// Err describes the failure for Retry and Dead (recorded as the message's last_error
	// and, for Dead, the dead-letter reason). Empty for Delivered.
	Err string
	// Status is the sink's status code when it has one (HTTP status), for logs; 0 otherwise.
	Status int
	// Timeout: the sink did not answer within its timeout (sluice_sink_responses_total
	// counts it as class "timeout").
	Timeout bool
}

// OutcomeDelivered is the outcome of an accepted delivery.
func OutcomeDelivered() Outcome { return Outcome{Verdict: Delivered} }

// OutcomeRetry is a transient failure; retryAfter 0 means "use the rule's backoff". err is
// redacted (redact.Text): it is stored with the message and shown as its last_error, so a
// sink URL's password or query string in it must not be.
func OutcomeRetry(retryAfter time.Duration, err string) Outcome {
	return Outcome{Verdict: Retry, RetryAfter: retryAfter, Err: redact.Text(err)}
}

// OutcomeDead is a permanent failure; reason is redacted as OutcomeRetry's err.
func OutcomeDead(reason string) Outcome { return Outcome{Verdict: Dead, Err: redact.Text(reason)} }

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
