package queue

import "time"

// Message is one admitted request as it travels through sluice: queued per key, parked in
// the retry stream, delivered to the sink, or dead. The same value is carried by queue/,
// retry/ and the drainer; its wire form is the NATS message (payload bytes as data, the
// rest in headers, see the Header* constants) so the payload is never re-encoded and
// reaches the sink byte-for-byte.
type Message struct {
	ID         string    // uuid v7; also the Nats-Msg-Id and the sink's Idempotency-Key
	Rule       string    // the rule's name
	Key        string    // the key as submitted (any UTF-8, ≤ 256 bytes)
	Payload    []byte    // JSON value exactly as submitted
	CreatedAt  time.Time // first admission (Sluice-Enqueued-At at the sink)
	Attempt    int       // delivery attempts already made (0 before the first)
	LastError  string    // last delivery or re-admission error, if any
	ParkedFrom time.Time // when the message was first parked (zero if never); used for park.max_age
	// ExpiresAt, when set, is when the message stops being worth delivering (a submission's
	// ttl / expires_at, or its rule's queue.max_age): still waiting then, it goes to the
	// dead letters with reason "expired" instead of to the sink.
	ExpiresAt time.Time
	// Headers are the submission's own headers for the sink (HTTP headers, or NATS headers),
	// names in canonical form; checked at submit (count, size, a deny list).
	Headers map[string]string
	// TraceParent and TraceState are the W3C trace context of the submission (the
	// admission span's when the ingress traces, else the submitter's own traceparent),
	// so the delivery's span and the sink's join the submitter's trace. Empty when the
	// submitter sent none and the ingress does not trace.
	TraceParent, TraceState string
	// Fence is the fencing token of the drainer's claim for this delivery (Scheduler.Claims.Claim),
	// sent to the sink as Sluice-Fence; 0 outside a delivery. Not part of the wire form.
	Fence int64
}

// Expired reports whether m is past its ExpiresAt at now.
func (m Message) Expired(now time.Time) bool {
	return !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt)
}

// NATS header names of the wire form. Header values are ASCII: the key is
// percent-encoded (like a URL path segment), times are RFC 3339 with nanoseconds.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderRule       = "Sluice-Rule"
	HeaderKey        = "Sluice-Key"
	HeaderCreatedAt  = "Sluice-Created-At"
	HeaderAttempt    = "Sluice-Attempt"
	HeaderLastError  = "Sluice-Last-Error"
	HeaderParkedFrom = "Sluice-Parked-From"
	HeaderExpiresAt  = "Sluice-Expires-At"
	// HeaderPrefixUser prefixes each of the submission's own headers (Message.Headers).
	HeaderPrefixUser = "Sluice-H-"
	// HeaderTraceParent and HeaderTraceState carry Message.TraceParent and TraceState (W3C
	// trace context values). Not under the W3C names: a NATS server (2.11+) parses the
	// headers of every message that has a "traceparent", for its own message tracing —
	// 18 allocations per publish, measured on the embedded server (BenchmarkSubmit).
	HeaderTraceParent = "Sluice-Traceparent"
	HeaderTraceState  = "Sluice-Tracestate"
	// HeaderID carries the message id when the Nats-Msg-Id is not the message id (a
	// re-admitted delivery retry, see Queues.EnqueueAs). It wins over Nats-Msg-Id.
	HeaderID = "Sluice-Id"
	// HeaderFormat is the wire format's version (FormatVersion); absent means 1.
	HeaderFormat = "Sluice-Format"
)

// The versions of the stored message format (the headers above). A reader accepts every
// version up to FormatVersion and refuses a newer one, so a message written by a later
// sluice is dead-lettered with that reason rather than delivered misread.
//
//	1  v0.3.0 and before (no Sluice-Format header): Nats-Msg-Id, Sluice-Id, Sluice-Rule,
//	   Sluice-Key, Sluice-Created-At, Sluice-Attempt, Sluice-Last-Error, Sluice-Parked-From.
//	2  adds Sluice-Format, and the optional Sluice-Expires-At, Sluice-H-* (the submitter's
//	   headers) and Sluice-Traceparent/-Tracestate. A version-1 reader ignores them, so it
//	   still delivers the payload under the right id and key; what it loses is the ttl
//	   (delivered after its expiry instead of dead-lettered), the submitter's headers and
//	   the trace link (integration TestRollingUpgrade).
//	3  the lean form of a submission's first admission under the own engine
//	   (Queues.EnqueueNew): Sluice-Format and Nats-Msg-Id, and the optional headers of
//	   version 2, but no Sluice-Rule, Sluice-Key or Sluice-Created-At — the rule is the
//	   stream's, the key its subject's (KeyToken) and the creation time its id's (the
//	   uuid v7's milliseconds, IssuedAt; DecodeStored). Every other message (a retry, a parked or scheduled one, a
//	   dead letter, one admitted under the claim engine) keeps version 2. A version-2
//	   reader refuses it (dead-lettered as written by a newer sluice), which is why it is
//	   written only once every drainer runs this version (docs/operations.md).
const FormatVersion = 3
