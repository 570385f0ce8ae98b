package sink

import (
	"net/textproto"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/queue"
)

// Header names seen by the sink (docs/delivery.md "The request"). They are the same for
// HTTP and NATS sinks so one consumer library can read both.
const (
	HeaderContentType    = "Content-Type"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderMessageID      = "Sluice-Message-Id"
	HeaderAttempt        = "Sluice-Attempt"
	HeaderRule           = "Sluice-Rule"
	HeaderKey            = "Sluice-Key"
	HeaderEnqueuedAt     = "Sluice-Enqueued-At"
	// HeaderFence is the fencing token of the drainer's claim on the key (decimal, > 0):
	// tokens of one key only grow from claim to claim, so a sink that remembers the largest
	// token it accepted for a key can refuse (e.g. 409) a delivery carrying a smaller one —
	// a drainer that lost its claim, still delivering. Equal tokens are the same claim
	// (its retries).
	HeaderFence = "Sluice-Fence"
)

// signatureHeaders are the names of both signature schemes (internal/sign), canonical. A
// submission stored before the ingress refused them, or by a client of the queue package,
// may hold one; it is dropped, whether or not the rule signs.
var signatureHeaders = map[string]bool{
	textproto.CanonicalMIMEHeaderKey(sign.Header):                 true,
	textproto.CanonicalMIMEHeaderKey(sign.HeaderWebhookID):        true,
	textproto.CanonicalMIMEHeaderKey(sign.HeaderWebhookTimestamp): true,
	textproto.CanonicalMIMEHeaderKey(sign.HeaderWebhookSignature): true,
}

// EnqueuedAtLayout is RFC 3339 with milliseconds: precise enough to order messages and
// parseable by every RFC 3339 parser (some choke on nanoseconds).
const EnqueuedAtLayout = "2006-01-02T15:04:05.000Z07:00"

// deliveryHeaders calls set for each sink header of m's next attempt. One function for
// both sinks so HTTP and NATS consumers see identical values.
func deliveryHeaders(rule *rules.Rule, m queue.Message, set func(k, v string)) {
	for k, v := range m.Headers { // the submission's own, first: none can be one of ours (checked at submit)
		if signatureHeaders[textproto.CanonicalMIMEHeaderKey(k)] {
			continue // never a submitter's: a sink would take it for sluice's signature
		}
		set(k, v)
	}
	set(HeaderContentType, "application/json")
	set(HeaderIdempotencyKey, m.ID)
	set(HeaderMessageID, m.ID)
	set(HeaderAttempt, strconv.Itoa(m.Attempt+1))
	name := m.Rule
	if rule != nil && rule.Name != "" {
		name = rule.Name
	}
	set(HeaderRule, name)
	set(HeaderKey, url.PathEscape(m.Key))
	if !m.CreatedAt.IsZero() {
		set(HeaderEnqueuedAt, m.CreatedAt.UTC().Format(EnqueuedAtLayout))
	}
	if m.Fence > 0 {
		set(HeaderFence, strconv.FormatInt(m.Fence, 10))
	}
}

// timeoutFor is the per-rule delivery timeout, falling back to def.
func timeoutFor(rule *rules.Rule, def time.Duration) time.Duration {
	if rule != nil && rule.Sink.Timeout > 0 {
		return rule.Sink.Timeout
	}
	return def
}
