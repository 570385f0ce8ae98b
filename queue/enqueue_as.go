package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
		if full := storeRefusal(err); full != nil {
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
