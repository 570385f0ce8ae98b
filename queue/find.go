package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	f, _, err := q.FindLimited(ctx, rule, key, id, FindLimits{})
	return f, err
}

// FindLimited is Find within lim; read is how many messages it read.
func (q *Queues) FindLimited(ctx context.Context, rule, key, id string, lim FindLimits) (f Found, read int, err error) {
	if err := CheckKey(key); err != nil {
		return Found{}, 0, err
	}
	f, read, err = FindInSubjectLimited(ctx, q.js.Conn(), q.cfg.APIPrefix, q.StreamName(rule), q.Subject(rule, key), id, lim)
	if err == nil && f.Header.Get(HeaderFormat) == leanFormatVersion {
		f.Message.Rule = rule // a lean message's: its stream's
	}
	if errors.Is(err, ErrNotQueued) {
		return Found{}, read, fmt.Errorf("%w (rule %q)", ErrNotQueued, rule)
	}
	return f, read, err
}

// findBatch is how many messages one direct-get request asks for.
const findBatch = 256

// FindLimits bounds the work of one lookup, so that a lookup of an id nobody issued (or
// one made up to be expensive) costs no more than a known number of messages read.
type FindLimits struct {
	// After is the earliest time the message can have been stored: an id is issued before
	// its message is stored, so its issue time less the clock skew between hosts. The
	// messages stored from After on are read first (where a message is found unless it
	// was stored again later, or the clocks disagree), then those before it, both within
	// MaxRead. Zero: read from the subject's first message.
	After time.Time
	// MaxRead is the most messages read (0: no bound). Reaching it ends the lookup with
	// ErrReadLimit.
	MaxRead int
}

// ErrReadLimit: the lookup read FindLimits.MaxRead messages without seeing the message;
// the subject holds more it did not read.
var ErrReadLimit = errors.New("queue: lookup stopped at its limit of messages read")

// FindInSubject reads the messages of one subject of a stream in order with batched
// direct gets (the stream needs allow_direct) until it sees message id — by its
// Sluice-Id header, else its Nats-Msg-Id. ErrNotQueued when the subject does not hold it.
// apiPrefix is the JetStream API prefix ("$JS.API." without a domain).
func FindInSubject(ctx context.Context, nc *nats.Conn, apiPrefix, stream, subject, id string) (Found, error) {
	f, _, err := FindInSubjectLimited(ctx, nc, apiPrefix, stream, subject, id, FindLimits{})
	return f, err
}

// FindInSubjectLimited is FindInSubject within lim; read is how many messages it read.
func FindInSubjectLimited(ctx context.Context, nc *nats.Conn, apiPrefix, stream, subject, id string, lim FindLimits) (f Found, read int, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	api := apiPrefix + "DIRECT.GET." + stream
	if lim.After.IsZero() {
		f, err = scanSubject(ctx, nc, api, subject, id, nil, nil, lim.MaxRead, &read)
		return f, read, err
	}
	// From After on: a message found there has messages before After ahead of it too,
	// which its position counts (the subject's count less what follows it).
	after := lim.After.UTC()
	f, err = scanSubject(ctx, nc, api, subject, id, &after, nil, lim.MaxRead, &read)
	if err == nil {
		f.Position, err = positionOf(ctx, nc, api, subject, f, &read)
		return f, read, err
	}
	if !errors.Is(err, ErrNotQueued) {
		return Found{}, read, err
	}
	// Then before After (clocks that disagree by more than the caller allowed for).
	left := 0
	if lim.MaxRead > 0 {
		if left = lim.MaxRead - read; left <= 0 {
			return Found{}, read, ErrReadLimit
		}
	}
	f, err = scanSubject(ctx, nc, api, subject, id, nil, &after, left, &read)
	return f, read, err
}

// scanSubject reads subject from its first message (or the first stored at start) up to
// the last stored before end (nil: to its end), at most max messages (0: no bound),
// counting them in read.
func scanSubject(ctx context.Context, nc *nats.Conn, api, subject, id string, start, end *time.Time, max int, read *int) (Found, error) {
	var seq uint64
	pos, scanned := 0, 0
	for {
		batch := findBatch
		if max > 0 {
			if scanned >= max {
				return Found{}, ErrReadLimit
			}
			batch = min(batch, max-scanned)
		}
		req, _ := json.Marshal(struct {
			Seq       uint64     `json:"seq,omitempty"`
			NextFor   string     `json:"next_by_subj"`
			Batch     int        `json:"batch"`
			StartTime *time.Time `json:"start_time,omitempty"`
			UpToTime  *time.Time `json:"up_to_time,omitempty"`
		}{seq, subject, batch, start, end})
		start = nil // later batches go on from seq
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return Found{}, fmt.Errorf("queue: find in %s: %w", api, err)
		}
		before := pos
		f, next, done, err := readBatch(ctx, nc, sub, api, inbox, req, id, &pos)
		sub.Unsubscribe() // the rest of a batch that held the message goes with it
		n := pos - before
		if err == nil && f.Seq != 0 {
			n++
		}
		scanned += n
		*read += n
		if err != nil || f.Seq != 0 {
			return f, err
		}
		if done {
			return Found{}, ErrNotQueued
		}
		seq = next
	}
}

// positionOf is how many messages of subject are ahead of f, found by a read that began
// past the subject's first message: the subject's count (the pending count of its first
// message, one more read) less the messages after f. Approximate while the subject
// changes between the two reads, as any position is.
func positionOf(ctx context.Context, nc *nats.Conn, api, subject string, f Found, read *int) (int, error) {
	after, err := strconv.Atoi(f.Header.Get("Nats-Num-Pending"))
	if err != nil {
		return 0, nil // a server that does not say: the position is unknown, say the head
	}
	req, _ := json.Marshal(struct {
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{subject, 1})
	msg, err := nc.RequestWithContext(ctx, api, req)
	if err != nil {
		return 0, fmt.Errorf("queue: find: %w", err)
	}
	*read++
	if msg.Header.Get("Status") != "" {
		return 0, nil // emptied meanwhile
	}
	rest, err := strconv.Atoi(msg.Header.Get("Nats-Num-Pending"))
	if err != nil {
		return 0, nil
	}
	return max(0, rest+1-after-1), nil
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
		ts, _ := time.Parse(time.RFC3339Nano, msg.Header.Get("Nats-Time-Stamp"))
		m, lean, derr := decodeMessage(msg.Header, msg.Data)
		switch {
		case derr != nil:
			m = Message{ID: id}
		case lean: // its key and creation time are its stream's; its rule the caller's (FindLimited)
			subject := msg.Header.Get("Nats-Subject")
			m.Key, _ = KeyFromToken(subject[strings.LastIndexByte(subject, '.')+1:])
			m.CreatedAt = createdAt(m.ID, ts)
		}
		return Found{Message: m, Seq: seq, StoredAt: ts, Position: *pos, Header: msg.Header}, next, true, nil
	}
}
