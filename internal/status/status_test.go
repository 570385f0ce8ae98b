package status_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/status"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newStore(t *testing.T) (*status.Store, context.Context) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	s := status.New(rdb, status.Config{Prefix: redistest.Prefix(t)})
	ctx := context.Background()
	s.Start(ctx)
	t.Cleanup(s.Stop)
	return s, ctx
}

func TestPutGetAndStateChanges(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t)
	created := time.Date(2026, 11, 22, 10, 0, 0, 123000, time.UTC)
	if err := s.Put(ctx, status.Status{ID: "id-1", Domain: "orders", Rule: "r", Key: "m.42 *>", State: status.Queued, CreatedAt: created, UpdatedAt: created}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Get(ctx, "id-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != status.Queued || st.Key != "m.42 *>" || !st.CreatedAt.Equal(created) || st.Domain != "orders" {
		t.Fatalf("got %+v", st)
	}
	if err := s.SetState(ctx, "id-1", status.Retrying, 2, "sink answered 503", time.Time{}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Get(ctx, "id-1")
	if st.State != status.Retrying || st.Attempts != 2 || st.LastError != "sink answered 503" {
		t.Fatalf("got %+v", st)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, status.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

// A drainer can report a state before the admission's own write lands; the admission's
// write must not turn a delivered message back into a queued one.
func TestLateAdmissionWriteKeepsNewerState(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t)
	if err := s.SetState(ctx, "id-2", status.Delivered, 1, "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := s.Put(ctx, status.Status{ID: "id-2", Domain: "d", Rule: "r", Key: "k", State: status.Queued, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Get(ctx, "id-2")
	if st.State != status.Delivered || st.Rule != "r" || st.Attempts != 1 {
		t.Fatalf("got %+v", st)
	}
}

func TestRecordIsWrittenInOrderAndFlushedOnStop(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	s := status.New(rdb, status.Config{Prefix: redistest.Prefix(t)})
	ctx := context.Background()
	s.Start(ctx)
	for i := 0; i < 1000; i++ {
		s.Record(ctx, "id-3", status.Delivering, i+1, "")
	}
	s.Record(ctx, "id-3", status.Delivered, 1001, "")
	s.Stop()
	s.Stop() // twice is fine
	st, err := s.Get(ctx, "id-3")
	if err != nil || st.State != status.Delivered || st.Attempts != 1001 {
		t.Fatalf("got %+v, %v", st, err)
	}
}

func TestRecordsExpire(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	p := redistest.Prefix(t)
	s := status.New(rdb, status.Config{Prefix: p, TTL: time.Hour})
	ctx := context.Background()
	now := time.Now()
	if err := s.Put(ctx, status.Status{ID: "id-4", State: status.Queued, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	ttl := rdb.PTTL(ctx, p+"sl:m:{id-4}").Val()
	if ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("ttl %v", ttl)
	}
}

func TestIdempotencyClaimAndRelease(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t)
	owner, claimed, err := s.ClaimIdempotency(ctx, "orders", "order-991", "id-a")
	if err != nil || !claimed || owner != "id-a" {
		t.Fatalf("first claim: %v %v %v", owner, claimed, err)
	}
	owner, claimed, _ = s.ClaimIdempotency(ctx, "orders", "order-991", "id-b")
	if claimed || owner != "id-a" {
		t.Fatalf("second claim: %v %v", owner, claimed)
	}
	// The same key under another rule is another key.
	if _, claimed, _ := s.ClaimIdempotency(ctx, "marketing", "order-991", "id-c"); !claimed {
		t.Fatal("keys of different rules collide")
	}
	// Only the owner can release.
	s.ReleaseIdempotency(ctx, "orders", "order-991", "id-b")
	if _, claimed, _ := s.ClaimIdempotency(ctx, "orders", "order-991", "id-d"); claimed {
		t.Fatal("a non-owner released the key")
	}
	s.ReleaseIdempotency(ctx, "orders", "order-991", "id-a")
	if owner, claimed, _ := s.ClaimIdempotency(ctx, "orders", "order-991", "id-e"); !claimed || owner != "id-e" {
		t.Fatal("released key not claimable")
	}
}
