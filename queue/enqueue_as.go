package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnqueueAs is Enqueue with an explicit Nats-Msg-Id. A delivery retry that goes back
// into its key's queue must not reuse m.ID as the dedup id (the stream would report a
// duplicate within its window and store nothing); the retry stream gives it a
// generation-specific id instead (retry.AdmitMsgID). The sink still sees m.ID.
func (q *Queues) EnqueueAs(ctx context.Context, rule string, m Message, msgID string) (Enqueued, error) {
	return q.enqueue(ctx, rule, m, msgID, false)
}

// EnqueueNew is Enqueue of a message admitted for the first time (a submission: no
// attempt made, never parked, under its own id), written in the lean form: its rule, key
// and creation time are not written into its headers but read back from its stream and
// its id — the rule's stream, its subject's key token and the time its id was issued,
// which stands in for m.CreatedAt (DecodeStored, IssuedAt). Messages of the lean form are read by this
// version's drainers and later ones only, which is why an ingress writes it only under
// the own engine (docs/operations.md, "Cutting over to the own engine": drainers first).
func (q *Queues) EnqueueNew(ctx context.Context, rule string, m Message) (Enqueued, error) {
	return q.enqueue(ctx, rule, m, "", true)
}

// enqueue publishes m to rule's stream (EnqueueAs, EnqueueNew) and names its answer.
func (q *Queues) enqueue(ctx context.Context, rule string, m Message, msgID string, lean bool) (Enqueued, error) {
	msg, err := q.encodeFor(rule, m, msgID, "", lean)
	if err != nil {
		return Enqueued{}, err
	}
	ack, err := q.publish(ctx, msg, q.StreamName(rule))
	return q.enqueued(rule, ack, err)
}

// encodeFor checks m and builds its message for rule's stream, with msgID as its
// Nats-Msg-Id when given and the Nats-Expected-Stream header set to stream when not "".
// lean asks for the lean form, which m gets only when it has nothing the form leaves out
// to carry: no attempt, parking or error, and its own id as Nats-Msg-Id.
func (q *Queues) encodeFor(rule string, m Message, msgID, stream string, lean bool) (*nats.Msg, error) {
	if err := CheckKey(m.Key); err != nil {
		return nil, err
	}
	if m.ID == "" {
		return nil, errors.New("queue: message without id")
	}
	if m.Rule == "" {
		m.Rule = rule
	}
	lean = lean && (msgID == "" || msgID == m.ID) && m.Attempt == 0 && m.ParkedFrom.IsZero() && m.LastError == ""
	msg := encodeMessage(q.Subject(rule, m.Key), m, stream, lean)
	if msgID != "" && msgID != m.ID {
		msg.Header.Set(HeaderID, m.ID)
		msg.Header.Set(HeaderMsgID, msgID)
	}
	return msg, nil
}

// enqueued is the result of a publish to rule's stream: its ack, or its error named for
// the caller (a refusal for lack of room as ErrFull, ErrRuleFull or ErrStoreFull).
func (q *Queues) enqueued(rule string, ack *jetstream.PubAck, err error) (Enqueued, error) {
	if err != nil {
		if full := storeRefusal(err); full != nil {
			if full == ErrStoreFull {
				q.storeFullAt.Store(time.Now().UnixNano())
			}
			return Enqueued{}, fmt.Errorf("%w (rule %q)", full, rule)
		}
		return Enqueued{}, fmt.Errorf("queue: enqueue to rule %q: %w", rule, err)
	}
	return Enqueued{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// storeRefusal names why the server refused to store a message for lack of room: the key's
// queue (ErrFull), the rule's stream (ErrRuleFull) or the whole store (ErrStoreFull); nil
// for any other error. The server answers these at once; a store whose disk fails to write
// (its max_store set above the volume's size) does not answer at all, which is why
// max_store should stay below the volume.
func storeRefusal(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return nil
	}
	switch apiErr.ErrorCode {
	case jsErrStoreFailed:
		switch {
		case strings.Contains(apiErr.Description, "per subject"):
			return ErrFull
		case strings.Contains(apiErr.Description, "maximum bytes"), strings.Contains(apiErr.Description, "maximum messages"):
			return ErrRuleFull
		}
	case jsErrInsufficientResources:
		return ErrStoreFull
	}
	return nil
}

// publishAttempt bounds one publish attempt: an attempt sent to a stream leader that died
// before answering is given up after this and sent again (the new leader answers it, or
// recognises it by its Nats-Msg-Id if the old one stored it).
const publishAttempt = 2 * time.Second

// publish stores msg in stream and rides through the stream's leader election: a publish
// that finds no leader (no responders, "temporarily unavailable") or whose leader died
// before answering is sent again, every 100 ms to 500 ms, for up to Config.PublishWait or
// until ctx ends (the client went away), instead of failing at once. Attempts carry the
// same Nats-Msg-Id, so one that was stored after all is not stored twice; when such an
// earlier attempt may have been stored, the stream's "duplicate" answer is this message's
// own, not another's. A client without a connection fails at once: nothing to wait for. An
// attempt under way is not cut short when ctx ends: its answer is normally milliseconds
// away, and an attempt takes no context (a context per publish cost 1.3 µs).
func (q *Queues) publish(ctx context.Context, msg *nats.Msg, stream string) (*jetstream.PubAck, error) {
	// The budget is a time, not a context: an admission that is answered at once (nearly
	// all) pays for no context at all.
	return q.publishUntil(ctx, msg, stream, time.Now().Add(q.cfg.PublishWait), false)
}

// publishUntil is publish with its budget's end given, for a message that may already have
// been stored by an earlier attempt (mayBeStored: its asynchronous publish timed out).
func (q *Queues) publishUntil(ctx context.Context, msg *nats.Msg, stream string, budget time.Time, mayBeStored bool) (*jetstream.PubAck, error) {
	pause := 100 * time.Millisecond
	for {
		wait := min(publishAttempt, time.Until(budget))
		if wait <= 0 { // the pause used the budget up: send nothing more
			return nil, fmt.Errorf("%w: no time left to publish", nats.ErrTimeout)
		}
		ack, err := q.publishOnce(msg, stream, wait)
		timedOut := errors.Is(err, nats.ErrTimeout)
		if err == nil {
			if mayBeStored && ack.Duplicate {
				ack.Duplicate = false // an earlier attempt of this very publish was stored
			}
			return ack, nil
		}
		if ctx.Err() != nil || !time.Now().Before(budget) || !electing(err, timedOut) || !q.js.Conn().IsConnected() {
			return nil, err
		}
		if q.StoreFull() {
			// A clustered stream whose server found its store full answers that once and
			// steps down; its replicas, as full, elect no new leader. No election to wait for:
			// the store is full.
			return nil, fmt.Errorf("%w: %v (the store refused a message for lack of room %s ago)", ErrStoreFull, err,
				time.Since(time.Unix(0, q.storeFullAt.Load())).Round(time.Millisecond))
		}
		// An attempt still in process (an earlier one is being stored) may be stored: the
		// stream's "duplicate" answer to a later attempt is then this message's own.
		mayBeStored = mayBeStored || timedOut || inProcess(err)
		t := time.NewTimer(min(pause, time.Until(budget)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// jsErrClusterNotAvailable: "JetStream system temporarily unavailable" (no meta or stream
// leader yet).
const jsErrClusterNotAvailable = 10008

// jsErrDuplicateInProcess: "duplicate message id is in process" — an earlier publish of the
// same Nats-Msg-Id (an attempt this loop gave up on, answered by a new leader) is still
// being stored.
const jsErrDuplicateInProcess = 10158

// electing reports an error that a stream's leader election explains: nobody answers the
// stream's subjects, the system is temporarily unavailable, the attempt timed out, or an
// earlier attempt sent before the election is still in process.
func electing(err error, timedOut bool) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
		return true
	case timedOut && errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrClusterNotAvailable, inProcess(err):
		return true
	}
	return false
}

// inProcess reports the stream's answer that an earlier publish of the message is still
// being stored.
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrDuplicateInProcess
}

// storeFullFor is how long after the store last refused a message for lack of room an
// unanswered publish is taken for the same condition rather than an election.
const storeFullFor = 10 * time.Second

// StoreFull reports whether the store refused a message for lack of room (its max_store)
// within the last storeFullFor: the ingress's readiness body and sluice_queue_store_full.
func (q *Queues) StoreFull() bool {
	at := q.storeFullAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < storeFullFor
}
