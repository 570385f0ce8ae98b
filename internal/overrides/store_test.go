package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
)

var bucketSeq atomic.Int64

// bucketName is unique per test, so tests may share a server.
func bucketName(t testing.TB) string {
	return fmt.Sprintf("ov_%s_%d", regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(t.Name(), "_"), bucketSeq.Add(1))
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore starts a server and opens a store on a bucket of its own.
func newStore(t testing.TB) (*natstest.Node, jetstream.JetStream, *overrides.Store) {
	t.Helper()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	s, err := overrides.Open(ctxFor(t), js, overrides.Config{Bucket: bucketName(t)})
	if err != nil {
		t.Fatal(err)
	}
	return node, js, s
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := overrides.Config{}.WithDefaults()
	if c.Bucket != overrides.DefaultBucket || c.Replicas != 1 || c.History != 5 || c.Clock == nil || c.Logger == nil {
		t.Errorf("defaults = %+v", c)
	}
	for _, bad := range []overrides.Config{
		{Replicas: 2}, {History: 65}, {Bucket: "a.b"},
	} {
		if err := bad.WithDefaults().Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
}

func TestStoreApplyGetReset(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)

	if _, ok, err := s.Get(ctx, r.Name); err != nil || ok {
		t.Fatalf("Get before any override = %v, %v", ok, err)
	}
	p, err := overrides.ParsePatch([]byte(`{"outflow":{"unit":"second","requests_per_unit":5},"paused":true}`))
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Apply(ctx, r, p)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Equal(overrides.Override{Outflow: rate(5, time.Second), Paused: boolp(true)}) || o.Revision == 0 || o.UpdatedAt.IsZero() {
		t.Fatalf("Apply = %v rev %d at %v", o, o.Revision, o.UpdatedAt)
	}
	got, ok, err := s.Get(ctx, r.Name)
	if err != nil || !ok || !got.Equal(o) || got.Revision != o.Revision {
		t.Fatalf("Get = %v (rev %d), %v, %v; want %v (rev %d)", got, got.Revision, ok, err, o, o.Revision)
	}

	// A second patch merges: outflow stays, capacity is added, paused is dropped.
	o2, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(7), Unset: overrides.FieldPaused})
	if err != nil {
		t.Fatal(err)
	}
	if !o2.Equal(overrides.Override{Outflow: rate(5, time.Second), Capacity: i64(7)}) || o2.Revision <= o.Revision {
		t.Fatalf("merged = %v rev %d", o2, o2.Revision)
	}

	// The same patch again writes nothing.
	o3, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(7)})
	if err != nil || o3.Revision != o2.Revision {
		t.Fatalf("no-op Apply = rev %d, %v; want rev %d", o3.Revision, err, o2.Revision)
	}

	// Reset through a patch, then again through Reset (a no-op).
	if _, err := s.Apply(ctx, r, overrides.Patch{Reset: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(ctx, r.Name); err != nil || ok {
		t.Fatalf("Get after reset = %v, %v", ok, err)
	}
	if err := s.Reset(ctx, r.Name); err != nil {
		t.Fatal(err)
	}

	// A deleted key can be written again.
	if _, err := s.Apply(ctx, r, overrides.Patch{Paused: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, r.Name); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, r.Name); ok {
		t.Fatal("override still there after Reset")
	}

	// Unsetting the last field removes the key, as a reset does.
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(3)}); err != nil {
		t.Fatal(err)
	}
	if o, err := s.Apply(ctx, r, overrides.Patch{Unset: overrides.FieldCapacity}); err != nil || !o.IsZero() {
		t.Fatalf("unset last field = %v, %v", o, err)
	}
	if _, ok, _ := s.Get(ctx, r.Name); ok {
		t.Fatal("empty override still stored")
	}

	if _, _, err := s.Get(ctx, "no.such rule"); !errors.Is(err, overrides.ErrInvalidName) {
		t.Errorf("Get(bad name) = %v, want ErrInvalidName", err)
	}
}

func TestStoreApplyMustFitRule(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t) // outflow 10/s, total_outflow 200/s

	// Outflow above the rule's total_outflow names the patched field.
	_, err := s.Apply(ctx, r, overrides.Patch{Outflow: rate(300, time.Second)})
	var pe *overrides.PatchError
	if !errors.Is(err, overrides.ErrInvalidPatch) || !errors.As(err, &pe) || pe.Field != "outflow" {
		t.Fatalf("outflow > total_outflow: %v (field %v)", err, pe)
	}
	// The message does not name its field again: "outflow: must be ≤ total_outflow …".
	if want := "outflow: must be ≤ total_outflow (300/s > 200/s); change total_outflow too, or null it to use the rules file's"; pe.Error() != want {
		t.Errorf("outflow > total_outflow: %q, want %q", pe.Error(), want)
	}
	// Raising both together is fine.
	if _, err := s.Apply(ctx, r, overrides.Patch{Outflow: rate(300, time.Second), TotalOutflow: rate(600, time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Then lowering total_outflow alone below the overridden outflow is refused, on total_outflow.
	_, err = s.Apply(ctx, r, overrides.Patch{TotalOutflow: rate(100, time.Second)})
	if !errors.As(err, &pe) || pe.Field != "total_outflow" {
		t.Fatalf("total_outflow < overridden outflow: %v", err)
	}
	if want := "total_outflow: must be ≥ outflow (100/s < 300/s); change outflow too, or null it to use the rules file's"; pe.Error() != want {
		t.Errorf("total_outflow < overridden outflow: %q, want %q", pe.Error(), want)
	}
	// Nothing was written by the refused patches.
	got, _, _ := s.Get(ctx, r.Name)
	if !got.Equal(overrides.Override{Outflow: rate(300, time.Second), TotalOutflow: rate(600, time.Second)}) {
		t.Fatalf("stored = %v", got)
	}

	// A check-only rule has nothing to tune.
	co := checkOnlyRule(t)
	_, err = s.Apply(ctx, co, overrides.Patch{Paused: boolp(true)})
	if !errors.Is(err, overrides.ErrNoQueue) || !errors.Is(err, overrides.ErrInvalidPatch) {
		t.Fatalf("check-only rule: %v", err)
	}
}

func TestStoreIfRevisionConflict(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)

	first, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(5)})
	if err != nil {
		t.Fatal(err)
	}
	// Admin B writes after admin A has read first.Revision.
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(6)}); err != nil {
		t.Fatal(err)
	}
	// Admin A's conditional write is refused: nothing is lost silently.
	_, err = s.Apply(ctx, r, overrides.Patch{Capacity: i64(50), IfRevision: &first.Revision})
	if !errors.Is(err, overrides.ErrConflict) {
		t.Fatalf("stale IfRevision: %v, want ErrConflict", err)
	}
	cur, _, _ := s.Get(ctx, r.Name)
	if *cur.Capacity != 6 {
		t.Fatalf("capacity = %d, want 6", *cur.Capacity)
	}
	// With the current revision it goes through.
	if _, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(50), IfRevision: &cur.Revision}); err != nil {
		t.Fatal(err)
	}
	// A conditional reset with a stale revision is refused too.
	if _, err := s.Apply(ctx, r, overrides.Patch{Reset: true, IfRevision: &cur.Revision}); !errors.Is(err, overrides.ErrConflict) {
		t.Fatalf("stale conditional reset: %v", err)
	}
}

// Two admins patching different fields at the same moment both land: the CAS loop
// re-reads and re-merges instead of overwriting.
func TestStoreConcurrentApplyLosesNothing(t *testing.T) {
	t.Parallel()
	_, js, s := newStore(t)
	ctx := ctxFor(t)
	r := testRule(t)
	// A second store (another ingress) on the same bucket.
	s2, err := overrides.Open(ctx, js, overrides.Config{Bucket: s.Bucket()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 1; i <= n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := s.Apply(ctx, r, overrides.Patch{Capacity: i64(int64(i))})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := s2.Apply(ctx, r, overrides.Patch{Outflow: rate(int64(i), time.Second)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := s.Get(ctx, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Capacity == nil || got.Outflow == nil {
		t.Fatalf("a concurrent patch was lost: %v", got)
	}
}

func TestStoreAll(t *testing.T) {
	t.Parallel()
	_, _, s := newStore(t)
	ctx := ctxFor(t)
	if all, err := s.All(ctx); err != nil || len(all) != 0 {
		t.Fatalf("All on an empty bucket = %v, %v", all, err)
	}
	r := testRule(t)
	for _, name := range []string{"orders-one", "orders-two", "orders-three"} {
		rl := *r
		rl.Name = name
		if _, err := s.Apply(ctx, &rl, overrides.Patch{Capacity: i64(1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reset(ctx, "orders-three"); err != nil {
		t.Fatal(err)
	}
	all, err := s.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["orders-one"].Capacity == nil || all["orders-two"].Capacity == nil {
		t.Fatalf("All = %v", all)
	}
}

// A write whose answer is lost (the server's replies dropped by a relay, for real, from
// the moment Apply stamps the override, just before it writes) is ErrOutcomeUnknown, not
// a plain error read as "nothing stored" — and the override is in fact stored.
func TestStoreApplyAnswerLostIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	relay := natstest.StartRelay(t, node.URL())
	_, js := natstest.Connect(t, relay.URL())
	bucket := bucketName(t)
	s, err := overrides.Open(ctxFor(t), js, overrides.Config{Bucket: bucket, Clock: func() time.Time {
		relay.DropReplies(true) // Clock is called once the override is decided, right before the write
		return time.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := overrides.ParsePatch([]byte(`{"paused":true}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Apply(ctx, testRule(t), p); !errors.Is(err, overrides.ErrOutcomeUnknown) {
		t.Fatalf("Apply with the answer lost: %v, want ErrOutcomeUnknown", err)
	}
	_, direct := natstest.Connect(t, node.URL())
	kv, err := direct.KeyValue(ctxFor(t), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctxFor(t), testRule(t).Name); err != nil || e.Revision() == 0 {
		t.Fatalf("the override after the lost answer: %v, want it stored", err)
	}
}
