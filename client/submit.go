package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// Entry is one key/value pair of a descriptor, e.g. {merchant_id m-42}. The values of a
// descriptor's entries select the key (the queue) under the rule they match.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// States of a message (GET /v1/messages/{id}). A new Submission is scheduled, queued or
// parked; a duplicate one may be in any state (see Submission).
const (
	StateScheduled  = "scheduled"
	StateQueued     = "queued"
	StateParked     = "parked"
	StateDelivering = "delivering"
	StateDelivered  = "delivered"
	StateRetrying   = "retrying"
	StateDead       = "dead"
	// StateCancelled: taken back by Cancel; answered only by an ingress that keeps
	// delivered records (-status-keep), while it keeps them.
	StateCancelled = "cancelled"
)

// Submission is the answer to an accepted POST /v1/messages (202), or to a repeat of an
// idempotency key already accepted within 24 h (200, Duplicate set).
//
// A duplicate (200) describes the original message as it is NOW, not as it was when it
// was accepted: its ID, its current State (any of the message states, or "" once it has
// left sluice with no delivered record kept) and RetryAt when parked or retrying. Its
// Depth, Capacity and ETA are zero and it has no rate-limit headers (RateLimit is zero).
type Submission struct {
	ID string `json:"id"`
	// State, for a new message (202), is StateQueued (in the key's queue), StateParked (in
	// the retry queue, to be re-admitted at RetryAt) or StateScheduled (waiting for its
	// delivery time, ETA). For a duplicate (200) it is the original's current state:
	// StateScheduled, StateQueued, StateParked, StateDelivering, StateRetrying,
	// StateDelivered (only where the ingress keeps delivered records, -status-keep),
	// StateDead, or "" when the original has left sluice (delivered or purged) and is no
	// longer tracked. Use Status for the rest.
	State string `json:"state"`
	// Depth and Capacity are the key's queue after admission (202 queued only; zero for a
	// duplicate). Under the server's own engine Depth (and ETA) only with WithDepth.
	Depth    int64 `json:"depth"`
	Capacity int64 `json:"capacity"`
	// ETA is when the message is expected to leave for the sink (202 queued), or to enter
	// its queue (202 scheduled); zero for a duplicate.
	ETA time.Time `json:"eta"`
	// RetryAt is when a parked (or retrying) message is next tried.
	RetryAt time.Time `json:"retry_at"`
	// Location is the Location header: the message's status URL, as sent (often relative).
	Location string `json:"-"`
	// RateLimit holds the rate-limit headers of the answer (none on a duplicate's 200).
	RateLimit RateLimit `json:"-"`
	// Duplicate is set when the server answered 200: the idempotency key had been accepted
	// before (perhaps by an earlier attempt of this very call whose answer was lost) and
	// nothing was enqueued this time.
	Duplicate bool `json:"-"`
	// IdempotencyKey is the key the submission was made with (generated or given).
	IdempotencyKey string `json:"-"`
	// Attempts is the number of HTTP requests Submit made.
	Attempts int `json:"-"`
}

// UnmarshalJSON reads a submission answer. It is lenient about eta and retry_at (RFC 3339
// per the contract; a number is read as Unix seconds, anything else left zero): the message
// is accepted by then, and an odd timestamp must not turn that into an error.
func (s *Submission) UnmarshalJSON(b []byte) error {
	type plain Submission
	var v struct {
		*plain
		ETA     json.RawMessage `json:"eta"`
		RetryAt json.RawMessage `json:"retry_at"`
	}
	v.plain = (*plain)(s)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	s.ETA, s.RetryAt = lenientTime(v.ETA), lenientTime(v.RetryAt)
	return nil
}

func lenientTime(raw json.RawMessage) time.Time {
	var t time.Time
	if len(raw) == 0 || json.Unmarshal(raw, &t) == nil {
		return t
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil && f > 0 {
		return time.Unix(0, int64(f*float64(time.Second))).UTC()
	}
	return time.Time{}
}

// SubmitOption changes one Submit call.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	idemKey   string
	overLim   *bool
	deliverAt time.Time
	delay     time.Duration
	expiresAt time.Time
	ttl       time.Duration
	ttlSet    bool // WithTTL was the last expiry option (a zero ttl is then refused)
	headers   map[string]string
	depth     bool // WithDepth
}

// check refuses, before anything is sent, times that would silently mean something else:
// a TTL of zero or less (a TTL computed as deadline.Sub(now) that has gone negative must
// not become "never expires"), an expiry instant not in the future, a negative delay.
func (o *submitOptions) check(now time.Time) error {
	if o.ttlSet && o.ttl <= 0 {
		return invalidf("Submit: WithTTL(%v): must be positive", o.ttl)
	}
	if !o.expiresAt.IsZero() && !o.expiresAt.After(now) {
		return invalidf("Submit: WithExpiresAt(%s): not in the future", o.expiresAt.Format(time.RFC3339Nano))
	}
	if o.delay < 0 {
		return invalidf("Submit: WithDelay(%v): negative", o.delay)
	}
	return nil
}

// WithHeaders gives the message headers of its own for the sink (HTTP headers, or NATS
// headers): at most 16, names of at most 64 bytes, values of at most 1024 bytes of visible
// ASCII, 4 KiB in all; Host, Content-*, Idempotency-Key, hop-by-hop headers and Sluice-* /
// Nats-* are sluice's and refused (ErrInvalid), as are credentials and forwarding headers
// (Authorization, Cookie, Proxy-*, Forwarded, X-Forwarded-*, X-Real-Ip): a sink
// authenticates sluice by its signature, not by a submitter's header.
func WithHeaders(h map[string]string) SubmitOption {
	return func(o *submitOptions) { o.headers = h }
}

// WithTTL makes the message expire d after its admission: still waiting then (queued,
// parked or scheduled), it is never delivered and becomes a dead letter with reason
// "expired". Its rule's queue.max_age, when shorter, wins. A d of zero or less is refused
// before anything is sent (an error matching ErrInvalid): it never means "never expires".
func WithTTL(d time.Duration) SubmitOption {
	return func(o *submitOptions) { o.ttl, o.ttlSet, o.expiresAt = d, true, time.Time{} }
}

// WithExpiresAt is WithTTL with an instant. A t that is not in the future (by the
// client's clock) is refused before anything is sent (an error matching ErrInvalid).
func WithExpiresAt(t time.Time) SubmitOption {
	return func(o *submitOptions) { o.expiresAt, o.ttl, o.ttlSet = t, 0, false }
}

// WithDeliverAt asks for delivery no earlier than t: the message is scheduled (State
// StateScheduled, ETA the time it enters its queue, rounded up to the second) and then
// obeys its key's outflow and capacity. A t in the past means now.
func WithDeliverAt(t time.Time) SubmitOption {
	return func(o *submitOptions) { o.deliverAt, o.delay = t, 0 }
}

// WithDelay asks for delivery no earlier than d from when the server admits the message.
// A zero d means now (no delay is sent); a negative d is refused before anything is sent
// (an error matching ErrInvalid).
func WithDelay(d time.Duration) SubmitOption {
	return func(o *submitOptions) { o.delay, o.deliverAt = d, time.Time{} }
}

// WithIdempotencyKey submits under key k instead of a generated one; use a key derived
// from the work itself (an order id) to make resubmissions across process restarts safe.
// The server keeps a key for 24 h; keys are at most 256 bytes of UTF-8.
func WithIdempotencyKey(k string) SubmitOption {
	return func(o *submitOptions) { o.idemKey = k }
}

// WithDepth asks for the key's depth and the message's ETA in the answer (Prefer:
// return=representation). Under the drainers' own engine (the server's default) a queued
// message's Depth and ETA are otherwise zero and its RateLimit empty, unless its rule has
// an admission limit: reading them costs the server a stream request per message, so only
// callers who use them should ask. Under -engine claim they are always there.
func WithDepth() SubmitOption {
	return func(o *submitOptions) { o.depth = true }
}

// SubmitOverLimitRetry overrides WithOverLimitRetry for one call.
func SubmitOverLimitRetry(retry bool) SubmitOption {
	return func(o *submitOptions) { o.overLim = &retry }
}

// ErrInvalidPayload is returned, before anything is sent, for a payload that is not JSON.
// It matches ErrInvalid too.
var ErrInvalidPayload error = &invalidError{msg: "payload is not valid JSON"}

// Submit asks sluice to deliver payload to the sink of the rule that domain and
// descriptor match, at that key's outflow.
//
// payload is any JSON value: a json.RawMessage or []byte is sent byte-for-byte (it must be
// valid JSON, and reaches the sink exactly as given); anything else is encoded with
// encoding/json (without HTML escaping).
//
// One idempotency key (a UUIDv7 unless WithIdempotencyKey) is used for every attempt of
// the call, so retries after a lost answer cannot enqueue twice. Once a request may have
// been sent, an error is a *SubmitError carrying that key (IdempotencyKeyOf), wrapping the
// cause: over-limit refusals as *OverLimitError, other refusals as *ProblemError; see the
// package doc for what is retried.
func (c *Client) Submit(ctx context.Context, domain string, descriptor []Entry, payload any, opts ...SubmitOption) (*Submission, error) {
	var o submitOptions
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if err := o.check(c.now()); err != nil {
		return nil, err
	}
	if o.idemKey == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("client: idempotency key: %w", err)
		}
		o.idemKey = id.String()
	}
	body, err := submitBody(domain, descriptor, payload, o.idemKey)
	if err != nil {
		return nil, err
	}
	body = withTimes(body, o)
	overLim := c.retryOverLim
	if o.overLim != nil {
		overLim = *o.overLim
	}
	header := http.Header{"Idempotency-Key": {o.idemKey}}
	if o.depth {
		header["Prefer"] = []string{"return=representation"}
	}
	resp, err := c.do(ctx, call{
		method:  http.MethodPost,
		path:    "/v1/messages",
		body:    body,
		header:  header,
		conn:    anyTransient,
		retry:   retryOverLimitOrUnavailable,
		ok:      is2xx,
		overLim: overLim,
		resend:  true,
		mutates: true,
		idemKey: o.idemKey,
	})
	if err != nil {
		return nil, &SubmitError{IdempotencyKey: o.idemKey, Err: err}
	}
	s := &Submission{}
	if err := json.Unmarshal(resp.body, s); err != nil || s.ID == "" {
		if err == nil {
			err = errors.New("no id")
		}
		// Accepted, or a duplicate, but of which message? The same key again answers 200
		// with it.
		return nil, &SubmitError{IdempotencyKey: o.idemKey, Err: &OutcomeUnknownError{Method: http.MethodPost, Path: "/v1/messages",
			IdempotencyKey: o.idemKey, Attempts: resp.attempts, Err: fmt.Errorf("a %d answer that could not be read: %w", resp.status, err)}}
	}
	s.Location = resp.header.Get("Location")
	s.RateLimit = ParseRateLimit(resp.header, c.now())
	s.Duplicate = resp.status == http.StatusOK
	s.IdempotencyKey = o.idemKey
	s.Attempts = resp.attempts
	return s, nil
}

// withTimes adds deliver_at / delay, expires_at / ttl and headers to a body built by
// submitBody.
func withTimes(body []byte, o submitOptions) []byte {
	var extra []byte
	switch {
	case !o.deliverAt.IsZero():
		extra = append(extra, `,"deliver_at":"`+o.deliverAt.Format(time.RFC3339Nano)+`"`...)
	case o.delay > 0:
		extra = append(extra, `,"delay":"`+o.delay.String()+`"`...)
	}
	switch {
	case !o.expiresAt.IsZero():
		extra = append(extra, `,"expires_at":"`+o.expiresAt.Format(time.RFC3339Nano)+`"`...)
	case o.ttl > 0:
		extra = append(extra, `,"ttl":"`+o.ttl.String()+`"`...)
	}
	if len(o.headers) > 0 {
		hb, _ := json.Marshal(o.headers) // a map of strings always encodes
		extra = append(append(extra, `,"headers":`...), hb...)
	}
	if len(extra) == 0 {
		return body
	}
	body = bytes.TrimRight(body, "\n")
	return append(append(body[:len(body)-1:len(body)-1], extra...), '}')
}

// submitBody builds the request body once, so every attempt sends the same bytes. The
// payload is spliced in rather than encoded through json.RawMessage, which would compact
// it and escape <, > and &: docs/delivery.md promises the sink the bytes as submitted.
func submitBody(domain string, descriptor []Entry, payload any, idemKey string) ([]byte, error) {
	var raw []byte
	switch p := payload.(type) {
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(payload); err != nil {
			return nil, fmt.Errorf("client: encoding the payload: %w", err)
		}
		raw = bytes.TrimRight(b.Bytes(), "\n")
	}
	if !json.Valid(raw) {
		return nil, ErrInvalidPayload
	}
	if descriptor == nil {
		descriptor = []Entry{} // "descriptor": [] names the missing field better than null
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteString(`{"domain":`)
	if err := enc.Encode(domain); err != nil {
		return nil, fmt.Errorf("client: encoding the domain: %w", err)
	}
	b.Truncate(b.Len() - 1)
	b.WriteString(`,"descriptor":`)
	if err := enc.Encode(descriptor); err != nil {
		return nil, fmt.Errorf("client: encoding the descriptor: %w", err)
	}
	b.Truncate(b.Len() - 1)
	b.WriteString(`,"payload":`)
	b.Write(raw)
	b.WriteString(`,"idempotency_key":`)
	if err := enc.Encode(idemKey); err != nil {
		return nil, fmt.Errorf("client: encoding the idempotency key: %w", err)
	}
	b.Truncate(b.Len() - 1)
	b.WriteByte('}')
	return b.Bytes(), nil
}
