package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/queue"
)

// EnqueueBatch answers each message as EnqueueAs would: the messages of a key are stored in
// the order given up to its capacity, the next is ErrFull, a repeated id is a duplicate, a
// bad key fails only itself — and the headers are EnqueueAs's (the message reads back
// whole, under its own id when published with another Nats-Msg-Id).
func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 2)
	ctx := context.Background()
	a1, b1, a2, a3 := msg("a", "a1"), msg("b", "b1"), msg("a", "a2"), msg("a", "a3")
	bad := msg(strings.Repeat("x", queue.MaxKeyBytes+1), "bad")
	pubs := []queue.Publication{
		{Rule: rule, Msg: a1}, {Rule: rule, Msg: b1, MsgID: "b1-generation-2"}, {Rule: rule, Msg: bad},
		{Rule: rule, Msg: a2}, {Rule: rule, Msg: a1}, {Rule: rule, Msg: a3},
	}
	q.EnqueueBatch(ctx, pubs)
	for i, want := range []struct {
		err error
		dup bool
	}{{nil, false}, {nil, false}, {queue.ErrBadKey, false}, {nil, false}, {nil, true}, {queue.ErrFull, false}} {
		p := pubs[i]
		if !errors.Is(p.Err, want.err) || (want.err == nil) != (p.Err == nil) || p.Enqueued.Duplicate != want.dup {
			t.Errorf("message %d: %+v %v, want error %v duplicate %v", i, p.Enqueued, p.Err, want.err, want.dup)
		}
	}
	for _, want := range []queue.Message{a1, a2} {
		got, err := q.Pop(ctx, rule, "a")
		if err != nil || got.ID != want.ID || string(got.Payload) != string(want.Payload) || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Fatalf("pop a: %+v %v, want %s", got.Message, err, want.ID)
		}
		if err := q.Delete(ctx, rule, got.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := q.Pop(ctx, rule, "b"); err != nil || got.ID != b1.ID || string(got.Payload) != "b1" {
		t.Fatalf("pop b: %+v %v, want %s under its own id", got.Message, err, b1.ID)
	}
}
