package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrNotQueued: Find did not see the message in its key's queue.
var ErrNotQueued = errors.New("queue: message not in its key's queue")

// Found is a message Find saw in its key's queue.
type Found struct {
	Message
	Seq      uint64    // stream sequence
	StoredAt time.Time // when the server stored it (its latest admission into the queue)
	Position int       // messages ahead of it in the key's queue (0: it is the head)
	Header   nats.Header
}

// Find looks for message id in the queue of (rule, key). It reads the key's subject in
// stream order (FindInSubject), so finding a message costs a request per findBatch
// messages ahead of it however many keys the rule has, and reads at most capacity
// messages. ErrNotQueued when the key's queue does not hold it.
func (q *Queues) Find(ctx context.Context, rule, key, id string) (Found, error) {
	if err := CheckKey(key); err != nil {
		return Found{}, err
	}
	f, err := FindInSubject(ctx, q.js.Conn(), q.cfg.APIPrefix, q.StreamName(rule), q.Subject(rule, key), id)
	if errors.Is(err, ErrNotQueued) {
		return Found{}, fmt.Errorf("%w (rule %q)", ErrNotQueued, rule)
	}
	return f, err
}

// findBatch is how many messages one direct-get request asks for.
const findBatch = 256

// FindInSubject reads the messages of one subject of a stream in order with batched
// direct gets (the stream needs allow_direct) until it sees message id — by its
// Sluice-Id header, else its Nats-Msg-Id. ErrNotQueued when the subject does not hold it.
// apiPrefix is the JetStream API prefix ("$JS.API." without a domain).
func FindInSubject(ctx context.Context, nc *nats.Conn, apiPrefix, stream, subject, id string) (Found, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	api := apiPrefix + "DIRECT.GET." + stream
	var seq uint64
	pos := 0
	for {
		req, _ := json.Marshal(struct {
			Seq     uint64 `json:"seq,omitempty"`
			NextFor string `json:"next_by_subj"`
			Batch   int    `json:"batch"`
		}{seq, subject, findBatch})
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return Found{}, fmt.Errorf("queue: find in %s: %w", stream, err)
		}
		f, next, done, err := readBatch(ctx, nc, sub, api, inbox, req, id, &pos)
		sub.Unsubscribe() // the rest of a batch that held the message goes with it
		if err != nil || f.Seq != 0 {
			return f, err
		}
		if done {
			return Found{}, ErrNotQueued
		}
		seq = next
	}
}

// readBatch sends one batched direct get and reads its answers up to the message or the
// end-of-batch marker. done: the subject has nothing after this batch.
func readBatch(ctx context.Context, nc *nats.Conn, sub *nats.Subscription, api, inbox string, req []byte, id string, pos *int) (f Found, next uint64, done bool, err error) {
	if err := nc.PublishRequest(api, inbox, req); err != nil {
		return Found{}, 0, false, fmt.Errorf("queue: find: %w", err)
	}
	n := 0
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return Found{}, 0, false, fmt.Errorf("queue: find: %w", err)
		}
		switch msg.Header.Get("Status") {
		case "":
		case "404": // nothing (more) on the subject
			return Found{}, 0, true, nil
		case "204": // end of batch
			pending, _ := strconv.ParseUint(msg.Header.Get("Nats-Num-Pending"), 10, 64)
			return Found{}, next, pending == 0 || n == 0, nil
		default:
			return Found{}, 0, false, fmt.Errorf("queue: find: direct get answered %s %s",
				msg.Header.Get("Status"), msg.Header.Get("Description"))
		}
		n++
		seq, _ := strconv.ParseUint(msg.Header.Get("Nats-Sequence"), 10, 64)
		next = seq + 1
		mid := msg.Header.Get(HeaderID)
		if mid == "" {
			mid = msg.Header.Get(HeaderMsgID)
		}
		if mid != id {
			*pos++
			continue
		}
		m, derr := DecodeMessage(msg.Header, msg.Data)
		if derr != nil {
			m = Message{ID: id}
		}
		ts, _ := time.Parse(time.RFC3339Nano, msg.Header.Get("Nats-Time-Stamp"))
		return Found{Message: m, Seq: seq, StoredAt: ts, Position: *pos, Header: msg.Header}, next, true, nil
	}
}
