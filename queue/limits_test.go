package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/queue"
)

// A rule's stream holds at most its max_bytes: a flood of one rule is refused with
// ErrRuleFull (not ErrFull: no key is at its capacity), and another rule's queue keeps
// accepting. Nothing already stored is dropped.
func TestRuleMaxBytesRefusesThatRuleOnly(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.EnsureLimits(ctx, "flood", queue.Limits{Capacity: 1000, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx, "calm", 1000); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 10_000)
	stored := 0
	for i := range 200 {
		_, err := q.Enqueue(ctx, "flood", msg("k"+string(rune('a'+i%26)), payload))
		if errors.Is(err, queue.ErrRuleFull) {
			break
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		stored++
	}
	if stored < 90 || stored > 105 {
		t.Fatalf("%d messages of 10 kB stored in a 1 MiB stream before ErrRuleFull", stored)
	}
	if _, err := q.Enqueue(ctx, "flood", msg("fresh-key", payload)); !errors.Is(err, queue.ErrRuleFull) || errors.Is(err, queue.ErrFull) {
		t.Fatalf("a new key of the full rule: %v, want ErrRuleFull", err)
	}
	if _, err := q.Enqueue(ctx, "calm", msg("k", payload)); err != nil {
		t.Fatalf("another rule while one is full: %v", err)
	}
	if st, err := q.Stats(ctx, "flood"); err != nil || st.Msgs != uint64(stored) {
		t.Fatalf("flood holds %+v (%v), want the %d stored", st, err, stored)
	}
}

// When the JetStream server's store (max_store) has no room, the server refuses at once
// and Enqueue says so (ErrStoreFull, not "unreachable" after a timeout); once messages
// are deleted the store takes messages again, without a restart. A stream whose limit the
// store cannot reserve is refused with an error naming what to change.
func TestStoreFullIsRefusedAtOnceAndClears(t *testing.T) {
	t.Parallel()
	node := natstest.StartWith(t, func(o *server.Options) { o.JetStreamMaxStore = 2 << 20 })
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = q.EnsureLimits(ctx, "big", queue.Limits{Capacity: 10, MaxBytes: 1 << 30})
	if err == nil || !strings.Contains(err.Error(), "-queue-max-bytes") || !strings.Contains(err.Error(), "max_store") {
		t.Fatalf("a 1 GiB stream on a 2 MiB store: %v, want an error naming queue.max_bytes, -queue-max-bytes and max_store", err)
	}
	if err := q.Ensure(ctx, "orders", 10_000); err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 20_000)
	var seqs []uint64
	var full error
	for i := range 500 {
		start := time.Now()
		e, err := q.Enqueue(ctx, "orders", msg("k"+string(rune('a'+i%26)), payload))
		if err != nil {
			if took := time.Since(start); took > time.Second {
				t.Errorf("the refusal took %v", took)
			}
			full = err
			break
		}
		seqs = append(seqs, e.Seq)
	}
	if !errors.Is(full, queue.ErrStoreFull) {
		t.Fatalf("after %d messages of 20 kB in a 2 MiB store: %v, want ErrStoreFull", len(seqs), full)
	}
	for _, s := range seqs[:len(seqs)/2] {
		if err := q.Delete(ctx, "orders", s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, "orders", msg("after", payload)); err != nil {
		t.Fatalf("after half the messages were delivered: %v", err)
	}
}
