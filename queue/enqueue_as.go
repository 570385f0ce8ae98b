package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// EnqueueAs is Enqueue with an explicit Nats-Msg-Id. A delivery retry that goes back
// into its key's queue must not reuse m.ID as the dedup id (the stream would report a
// duplicate within its window and store nothing); the retry stream gives it a
// generation-specific id instead (retry.AdmitMsgID). The sink still sees m.ID.
func (q *Queues) EnqueueAs(ctx context.Context, rule string, m Message, msgID string) (Enqueued, error) {
	if err := CheckKey(m.Key); err != nil {
		return Enqueued{}, err
	}
	if m.ID == "" {
		return Enqueued{}, errors.New("queue: message without id")
	}
	if m.Rule == "" {
		m.Rule = rule
	}
	msg := EncodeMessage(q.Subject(rule, m.Key), m)
	if msgID != "" && msgID != m.ID {
		msg.Header.Set(HeaderID, m.ID)
		msg.Header.Set(HeaderMsgID, msgID)
	}
	ack, err := q.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(q.StreamName(rule)))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrMaxMsgsPerSubject {
			return Enqueued{}, fmt.Errorf("%w (rule %q)", ErrFull, rule)
		}
		return Enqueued{}, fmt.Errorf("queue: enqueue to rule %q: %w", rule, err)
	}
	return Enqueued{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}
