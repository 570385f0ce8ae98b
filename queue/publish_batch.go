package queue

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// asyncMaxPending bounds the asynchronous publishes of EnqueueBatch awaiting their PubAcks,
// every batch of the process together (max-batch 500 × 32 batches at once). A publish over
// it waits up to 200 ms for room (nats.go's stall wait), then is published synchronously.
const asyncMaxPending = 16384

// newAsync is the JetStream context of EnqueueBatch, on js's connection: its own limit of
// pending acks, and an ack not received within publishAttempt fails (and is published
// again synchronously, as a timed-out attempt of publish is), so no pending ack is kept
// for ever.
func newAsync(js jetstream.JetStream) (jetstream.JetStream, error) {
	return jetstream.New(js.Conn(), jetstream.WithPublishAsyncMaxPending(asyncMaxPending),
		jetstream.WithPublishAsyncTimeout(publishAttempt))
}

// Publication is one message of EnqueueBatch, with its result.
type Publication struct {
	Rule  string
	Msg   Message
	MsgID string // Nats-Msg-Id when it is not Msg.ID (see EnqueueAs)
	// New: Msg is admitted for the first time, and is written in the lean form as
	// EnqueueNew writes it (when it has no attempt, parking or error, and its own id).
	New bool

	Enqueued Enqueued // the result when Err is nil
	Err      error    // what EnqueueAs would have returned

	msg    *nats.Msg
	future jetstream.PubAckFuture // nil: not published asynchronously
}

// EnqueueBatch is EnqueueAs of many messages at once: all of them are published
// asynchronously on the one NATS connection, in the order given, and then every PubAck is
// waited for. The server stores the messages of one connection in the order it receives
// them, so the messages of one key enter its queue in the order given, and each gets its
// own answer: one refused (its key's queue full) or failing fails only itself. It costs a
// fraction of one synchronous publish per message: no round trip, reply subscription or
// context of its own, and one write to the connection for many messages.
//
// A publish that finds no stream leader or whose ack does not come within publishAttempt is
// sent again synchronously and rides through the election as EnqueueAs does, within one
// PublishWait from the batch's start, or until ctx ends. Such a retried message may then
// enter its key's queue after a later message of the same batch that was stored at once:
// order within a key holds for every message stored on its first attempt. A message that
// cannot be published asynchronously (too many acks pending in the process) is published
// synchronously with every later one, in order.
func (q *Queues) EnqueueBatch(ctx context.Context, pubs []Publication) {
	budget := time.Now().Add(q.cfg.PublishWait)
	async := true           // until a message cannot be published asynchronously
	var rule, stream string // the last message's: a batch is usually of one rule
	for i := range pubs {
		p := &pubs[i]
		if p.Rule != rule || stream == "" {
			rule, stream = p.Rule, q.StreamName(p.Rule)
		}
		// With what WithExpectStream sets, without the option's allocations.
		msg, err := q.encodeFor(p.Rule, p.Msg, p.MsgID, stream, p.New)
		if err != nil {
			p.Err = err
			continue
		}
		p.msg = msg
		if async {
			if p.future, err = q.async.PublishMsgAsync(msg); err != nil {
				// Too many acks pending, or no connection: this message and every later one
				// are published synchronously below, in order, so a key's later message is
				// never sent ahead of it.
				p.future, async = nil, false
			}
		}
	}
	for i := range pubs {
		p := &pubs[i]
		if p.msg == nil {
			continue
		}
		var ack *jetstream.PubAck
		var err error
		retry, mayBeStored := p.future == nil, false
		if p.future != nil {
			// Not ended by ctx: the message is sent, and its ack (within publishAttempt)
			// says whether it was stored, so that the caller counts and marks it right
			// even when its client went away.
			select {
			case ack = <-p.future.Ok():
			case err = <-p.future.Err():
				// Timed out, or the connection dropped with the ack outstanding: the
				// message may be stored; the retry's duplicate answer is then its own.
				mayBeStored = errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrDisconnected)
				retry = mayBeStored || electing(err, false)
			}
		}
		if retry {
			ack, err = q.publishUntil(ctx, p.msg, q.StreamName(p.Rule), budget, mayBeStored)
		}
		p.Enqueued, p.Err = q.enqueued(p.Rule, ack, err)
		p.msg, p.future = nil, nil
	}
}
