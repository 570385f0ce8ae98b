package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// TestDeleteAsync: a delete sent without waiting reports its outcome through its callback —
// nil, then ErrGone for the same sequence (exactly one delete of a message succeeds) — and
// the message is gone from its key's queue.
func TestDeleteAsync(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 10)
	ctx := context.Background()
	e, err := q.Enqueue(ctx, rule, queue.Message{ID: "m1", Key: "k", Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	del := func() error {
		t.Helper()
		done := make(chan error, 1)
		if err := q.DeleteAsync(rule, e.Seq, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to the async delete")
			return nil
		}
	}
	if err := del(); err != nil {
		t.Fatalf("first delete: %v", err)
	}
	if _, err := q.Pop(ctx, rule, "k"); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("pop after the delete: %v, want ErrEmpty", err)
	}
	if err := del(); !errors.Is(err, queue.ErrGone) {
		t.Fatalf("second delete of the same sequence: %v, want ErrGone", err)
	}
}
