package delivery

import (
	"time"

	"github.com/sluice-io/sluice/internal/redact"
)

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

// Dead-letter reasons that more than one part gives (a sink's own reason is its Outcome's
// Err). They are stored with the dead letter and shown by the admin API, so they are part
// of the API: do not reword them.
const (
	// ReasonExpired: the message was found past its expiry (a submission's ttl or
	// expires_at, or its rule's queue.max_age) before it was delivered — by a drainer at
	// its key's head, or by the re-admitter while it was parked or scheduled.
	ReasonExpired = "expired"
	// ReasonRuleRemoved: the message's rule is no longer in the rules (the re-admitter
	// found it parked or scheduled without one).
	ReasonRuleRemoved = "rule removed"
)
