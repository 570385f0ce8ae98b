package retry

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/queue"
)

// Headers this package adds to the queue.Message wire form (queue.EncodeMessage).
const (
	// HeaderRetryAt is the second a schedule fires (RFC 3339), i.e. the retry_at the
	// caller was told; the re-admitter measures its lateness from it.
	HeaderRetryAt = "Sluice-Retry-At"
	// HeaderKind is KindPark or KindRetry.
	HeaderKind = "Sluice-Retry-Kind"
	// HeaderParks counts how many times the message was parked; it indexes the re-park backoff.
	HeaderParks = "Sluice-Parks"
	// HeaderDeadReason is why a message is dead (percent-encoded: any text).
	HeaderDeadReason = "Sluice-Dead-Reason"
	// HeaderDeadAt is when the message became dead (RFC 3339 with nanoseconds).
	HeaderDeadAt = "Sluice-Dead-At"
)

// Kinds of schedule.
const (
	KindPark  = "park"  // no room in the key's queue (overflow: park); subject to park.max_age
	KindRetry = "retry" // delivery retry of a relaxed rule; bounded by delivery.max_attempts
	// KindSchedule is a message submitted with a later delivery time (deliver_at, delay):
	// re-admitted at that time, and parked then if its queue has no room.
	KindSchedule = "schedule"
)

// FireTime is when a schedule for at actually fires: at rounded up to the whole second
// (Nats-Schedule @at has one-second resolution and must never fire early), and never
// before now's second (a past time fires at once). It is the honest retry_at to report.
func FireTime(at, now time.Time) time.Time {
	if at.Before(now) {
		at = now
	}
	t := at.Truncate(time.Second)
	if t.Before(at) {
		t = t.Add(time.Second)
	}
	return t.UTC()
}

// AdmitMsgID is the Nats-Msg-Id a re-admission of m must be published with.
//
// A parked message that never entered its queue (m.Attempt == 0) keeps its own id: a
// publish refused as "queue full" does not record the id, and the original publish
// succeeding later is exactly what the id should deduplicate. A message that was already
// queued once — a delivery retry (m.Attempt > 0) — must not reuse it: the queue stream's
// duplicate window (≥ 2 min) would report a duplicate and store nothing, losing the
// message. Its generation is its attempt count, so two re-admissions of the same retry
// (two re-admitters, a redelivery after a crash) still share one id and deduplicate.
// The sink's Idempotency-Key stays m.ID in every case.
func AdmitMsgID(m queue.Message) string {
	if m.Attempt == 0 {
		return m.ID
	}
	return m.ID + ".a" + strconv.Itoa(m.Attempt)
}

// replayMsgID is the Nats-Msg-Id of a replayed dead letter: unique per dead letter (its
// stream sequence), shared by two concurrent replays of the same one.
func replayMsgID(id string, seq uint64) string {
	return id + ".r" + strconv.FormatUint(seq, 10)
}

// scheduleMeta is what this package keeps next to a message in the retry stream.
type scheduleMeta struct {
	Kind    string
	RetryAt time.Time
	Parks   int
}

// encode builds the wire form of m for subject. The id travels in queue.HeaderID, never
// in Nats-Msg-Id: the scheduler strips Nats-Msg-Id from fired messages, and in these
// streams it would deduplicate a legitimate re-park or a second dead letter.
func encode(subject string, m queue.Message) *nats.Msg {
	msg := queue.EncodeMessage(subject, m)
	msg.Header.Del(queue.HeaderMsgID)
	msg.Header.Set(queue.HeaderID, m.ID)
	return msg
}

// decode reads a message written by encode (possibly copied by the scheduler).
func decode(h nats.Header, data []byte) (queue.Message, error) {
	m, err := queue.DecodeMessage(h, data)
	if err != nil {
		return queue.Message{}, fmt.Errorf("retry: %w", err)
	}
	return m, nil
}

func decodeMeta(h nats.Header) scheduleMeta {
	meta := scheduleMeta{Kind: h.Get(HeaderKind)}
	if meta.Kind == "" {
		meta.Kind = KindPark
	}
	meta.RetryAt, _ = time.Parse(time.RFC3339, h.Get(HeaderRetryAt))
	meta.Parks, _ = strconv.Atoi(h.Get(HeaderParks))
	return meta
}

// escapeHeader makes any text a one-line ASCII header value.
func escapeHeader(s string) string { return url.PathEscape(s) }

func unescapeHeader(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// token is one safe subject token for a rule name or a message id (see queue.RuleToken).
func token(s string) string { return queue.RuleToken(s) }

// joinSubject prefixes parts with prefix (when set), joined by '.'.
func joinSubject(prefix string, parts ...string) string {
	s := prefix
	for _, p := range parts {
		if s != "" {
			s += "."
		}
		s += p
	}
	return s
}
