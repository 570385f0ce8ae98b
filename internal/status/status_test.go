package status_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/retryrules"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// world is everything a Locator reads, on a real nats-server and redis-server.
type world struct {
	loc    *status.Locator
	q      *queue.Queues
	sched  *queue.Scheduler
	park   *retry.Store
	dead   *retry.DeadLetters
	rec    *status.DeliveredRecords
	rule   *rules.Rule
	ctx    context.Context
	stored []queue.Message
	node   *natstest.Node
}

func newWorld(t *testing.T) *world { return newWorldVia(t, nil) }

// newWorldVia is newWorld whose NATS connection goes to via(url) instead of the server's
// url (a relay); nil connects directly.
func newWorldVia(t *testing.T, via func(url string) string) *world {
	t.Helper()
	set, err := rules.Parse("orders.yaml", []byte(`
domain: shop
descriptors:
  - key: merchant_id
    name: orders
    queue:
      capacity: 600
      outflow: {unit: second, requests_per_unit: 10}
    sink: {url: "http://127.0.0.1:1/sink"}
`))
	if err != nil {
		t.Fatal(err)
	}
	node := natstest.Start(t)
	url := node.URL()
	if via != nil {
		url = via(url)
	}
	nc, js := natstest.Connect(t, url)
	rdb := redistest.Shared(t).Client(t)
	w := &world{rule: set.Rule("orders"), ctx: context.Background(), node: node}
	if w.q, err = queue.NewQueues(js, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := w.q.Ensure(w.ctx, "orders", 600); err != nil {
		t.Fatal(err)
	}
	if w.sched, err = queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t)}); err != nil {
		t.Fatal(err)
	}
	if w.park, err = retry.NewStore(js, retry.Config{}); err != nil {
		t.Fatal(err)
	}
	if w.dead, err = retry.NewDeadLetters(js, retry.DeadConfig{Rules: retryrules.Lookup(set.Rule)}); err != nil {
		t.Fatal(err)
	}
	if w.rec, err = status.NewDeliveredRecords(nc, status.DeliveredConfig{Keep: time.Hour, Max: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, ensure := range []func(context.Context) error{w.park.Ensure, w.dead.Ensure, w.rec.Ensure} {
		if err := ensure(w.ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.loc = &status.Locator{Rules: func() *rules.Set { return set }, Queues: w.q, Scheduler: w.sched, Parking: w.park, Dead: w.dead, Delivered: w.rec}
	return w
}

func (w *world) enqueue(t *testing.T, key string) queue.Message {
	t.Helper()
	id, err := queue.NewID("orders", key)
	if err != nil {
		t.Fatal(err)
	}
	m := queue.Message{ID: id, Key: key, Payload: []byte(`{}`), CreatedAt: time.Now().UTC()}
	if _, err := w.q.Enqueue(w.ctx, "orders", m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (w *world) get(t *testing.T, id string) status.Status {
	t.Helper()
	st, err := w.loc.Get(w.ctx, id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return st
}

// Every state is read from where the message is: its key's queue (queued with its
// position, delivering while a drainer holds the key, retrying with the scheduler's
// attempts), the retry stream (parked), the dead letters (dead), the opt-in delivered
// records (delivered); a message that is nowhere is "no longer tracked", with what its id
// says; an id sluice never issued is "never seen".
func TestLocatorAnswersEveryStateFromWhereTheMessageIs(t *testing.T) {
	w := newWorld(t)
	key := "merchant 7 *.>" // keys are data: dots, wildcards and spaces are a key like any other
	var ms []queue.Message
	for i := 0; i < 300; i++ { // more than one direct-get batch ahead of the last
		ms = append(ms, w.enqueue(t, key))
	}
	w.enqueue(t, "another merchant")

	last := w.get(t, ms[299].ID)
	if last.State != status.Queued || last.Position != 299 || last.Rule != "orders" || last.Domain != "shop" || last.Key != key {
		t.Fatalf("last of 300: %+v, want queued at position 299", last)
	}
	if !last.CreatedAt.Equal(ms[299].CreatedAt) || last.UpdatedAt.IsZero() {
		t.Fatalf("times: %+v", last)
	}

	// A drainer claims the key: its head is being delivered; the rest are still queued.
	now := time.Now()
	if _, err := w.sched.Claims.MarkDueAt(w.ctx, "orders", now, key); err != nil {
		t.Fatal(err)
	}
	claimed, err := w.sched.Claims.Claim(w.ctx, "orders", now, queue.ClaimRequest{Owner: "d1", Max: 1, Lease: time.Minute,
		Outflow: queue.Outflow{Every: 100 * time.Millisecond}})
	if err != nil || len(claimed.Claims) != 1 {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	if st := w.get(t, ms[0].ID); st.State != status.Delivering {
		t.Fatalf("head of a held key: %+v, want delivering", st)
	}
	if _, err := w.loc.Cancel(w.ctx, ms[0].ID); !errors.Is(err, status.ErrNotCancellable) {
		t.Fatalf("cancel of a message being delivered: %v, want ErrNotCancellable", err)
	}
	if st := w.get(t, ms[1].ID); st.State != status.Queued || st.Position != 1 {
		t.Fatalf("second of a held key: %+v, want queued at 1", st)
	}
	// Its delivery failed twice (strict ordering: it stays at the head).
	if _, err := w.sched.Claims.Release(w.ctx, "orders", "d1", 0, queue.Release{Key: key, Mode: queue.Retrying, At: now.Add(time.Minute),
		State: queue.RetryState{MsgID: ms[0].ID, Attempts: 2, LastError: "sink answered 503"}}); err != nil {
		t.Fatal(err)
	}
	if st := w.get(t, ms[0].ID); st.State != status.Retrying || st.Attempts != 2 || st.LastError != "sink answered 503" {
		t.Fatalf("head being retried: %+v", st)
	}

	// Parked: found by its id in the retry stream, with its retry_at.
	pm := queue.Message{ID: mustID(t, key), Key: key, Payload: []byte(`{}`), CreatedAt: time.Now()}
	fire, err := w.park.Park(w.ctx, w.rule.Name, pm, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if st := w.get(t, pm.ID); st.State != status.Parked || !st.RetryAt.Equal(fire) {
		t.Fatalf("parked: %+v, want retry_at %v", st, fire)
	}

	// Cancel: a held head is being delivered and stays; a parked message is taken back.
	if _, err := w.loc.Cancel(w.ctx, pm.ID); err != nil {
		t.Fatalf("cancel parked: %v", err)
	}
	// With delivered records on, its status says it was cancelled, and a repeated cancel
	// (its first answer lost) answers the same; without them it is "no longer tracked".
	if st := w.get(t, pm.ID); st.State != status.Cancelled || st.Rule != "orders" || st.Key != key || st.UpdatedAt.IsZero() {
		t.Fatalf("a cancelled parked message: %+v, want cancelled", st)
	}
	if st, err := w.loc.Cancel(w.ctx, pm.ID); err != nil || st.State != status.Cancelled {
		t.Fatalf("cancel again: %+v %v, want cancelled", st, err)
	}
	noRecords := &status.Locator{Rules: w.loc.Rules, Queues: w.loc.Queues, Scheduler: w.loc.Scheduler, Parking: w.loc.Parking, Dead: w.loc.Dead}
	if _, err := noRecords.Get(w.ctx, pm.ID); !errors.Is(err, status.ErrNotTracked) {
		t.Fatalf("a cancelled parked message without records: %v, want no longer tracked", err)
	}
	// A queued message cancelled: the same.
	qm := w.enqueue(t, "third merchant")
	if _, err := w.loc.Cancel(w.ctx, qm.ID); err != nil {
		t.Fatalf("cancel queued: %v", err)
	}
	if st := w.get(t, qm.ID); st.State != status.Cancelled {
		t.Fatalf("a cancelled queued message: %+v, want cancelled", st)
	}
	// A cancelled record is not a delivery.
	if _, _, ok, err := w.rec.Get(w.ctx, qm.ID); ok || err != nil {
		t.Fatalf("Get of a cancelled record: ok %v, %v; want none", ok, err)
	}

	// Dead.
	dm := queue.Message{ID: mustID(t, key), Rule: "orders", Key: key, Payload: []byte(`{}`), CreatedAt: time.Now(), Attempt: 8}
	if err := w.dead.Dead(w.ctx, w.rule.Name, dm, "8 attempts, last error: 500"); err != nil {
		t.Fatal(err)
	}
	if st := w.get(t, dm.ID); st.State != status.Dead || st.LastError != "8 attempts, last error: 500" || st.Attempts != 8 || st.Domain != "shop" {
		t.Fatalf("dead: %+v", st)
	}
	var nc *status.NotCancellable
	if _, err := w.loc.Cancel(w.ctx, dm.ID); !errors.As(err, &nc) || nc.Status.State != status.Dead {
		t.Fatalf("cancel dead: %v", err)
	}

	// Gone: delivered (or purged) with no record — an honest "no longer tracked".
	goneID := mustID(t, key)
	_, err = w.loc.Get(w.ctx, goneID)
	var gone *status.Gone
	if !errors.As(err, &gone) || !errors.Is(err, status.ErrNotTracked) || gone.Rule != "orders" || gone.Key != key || time.Since(gone.IssuedAt) > time.Minute {
		t.Fatalf("an id never stored: %v (%+v)", err, gone)
	}
	// The same id with a delivered record (written asynchronously by the drainer).
	w.rec.Record(w.ctx, goneID, status.Delivered, 3, "")
	var st status.Status
	waittest.Eventually(t, 5*time.Second, "the delivered record read", func() bool {
		st, err = w.loc.Get(w.ctx, goneID)
		return err == nil
	})
	if st.State != status.Delivered || st.Attempts != 3 || st.Key != key || st.UpdatedAt.IsZero() {
		t.Fatalf("delivered record: %+v", st)
	}
	if w.rec.Dropped() != 0 {
		t.Fatalf("%d records dropped", w.rec.Dropped())
	}
	// What a record costs on disk, as docs/operations.md states it (capacity planning).
	info, err := w.rec.Info(w.ctx)
	if err != nil || info.State.Msgs != 3 { // the delivered one and the two cancelled

		t.Fatalf("records stream: %+v %v", info, err)
	}
	perRecord := info.State.Bytes / info.State.Msgs
	t.Logf("one record: %d bytes in the stream", perRecord)
	if perRecord > 300 {
		t.Errorf("a record takes %d bytes, want at most 300", perRecord)
	}

	// Never seen: not an id, or an id of a rule that is not in force.
	for _, id := range []string{"nonsense", uuid.Must(uuid.NewV7()).String() + ".nosuchrule.kbQ", ""} {
		if _, err := w.loc.Get(w.ctx, id); !errors.Is(err, status.ErrNeverSeen) {
			t.Errorf("Get(%q): %v, want ErrNeverSeen", id, err)
		}
	}
	// An id of an earlier version (a bare uuid) names no key: only its dead letter is found.
	legacy := uuid.Must(uuid.NewV7()).String()
	if _, err := w.loc.Get(w.ctx, legacy); !errors.As(err, &gone) || !gone.Legacy {
		t.Fatalf("legacy id: %v", err)
	}
	if err := w.dead.Dead(w.ctx, w.rule.Name, queue.Message{ID: legacy, Rule: "orders", Key: "k", Payload: []byte(`1`)}, "refused"); err != nil {
		t.Fatal(err)
	}
	if st := w.get(t, legacy); st.State != status.Dead || st.Key != "k" {
		t.Fatalf("legacy dead letter: %+v", st)
	}
}

// A delivered message whose record is still on its way to the records stream (the drainer
// hands it to an asynchronous writer just before it deletes the message) is answered
// delivered, not "no longer tracked": a lookup that finds the message nowhere waits up to
// RecordGrace for its record.
func TestLocatorWaitsForADeliveredRecordOnItsWay(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 5; i++ {
		id := mustID(t, "k")
		go func() {
			time.Sleep(30 * time.Millisecond) // longer than a lookup takes, within the grace
			w.rec.Record(w.ctx, id, status.Delivered, 1, "")
		}()
		st, err := w.loc.Get(w.ctx, id)
		if err != nil || st.State != status.Delivered {
			t.Fatalf("round %d: %+v %v, want delivered", i, st, err)
		}
	}
	// Without a record on its way the answer is "no longer tracked", after the grace.
	start := time.Now()
	if _, err := w.loc.Get(w.ctx, mustID(t, "k")); !errors.Is(err, status.ErrNotTracked) {
		t.Fatalf("no record: %v, want ErrNotTracked", err)
	}
	if d := time.Since(start); d < status.RecordGrace || d > status.RecordGrace+time.Second {
		t.Fatalf("no record answered after %v, want the grace of %v", d, status.RecordGrace)
	}
}

// A message moving from the retry stream back into its queue is found on one side or the
// other while it moves: the queue is looked at again last.
func TestLocatorFindsAMessageReadmittedWhileLooking(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 50; i++ {
		m := queue.Message{ID: mustID(t, "k"), Key: "k", Payload: []byte(`{}`), CreatedAt: time.Now()}
		if _, err := w.park.Park(w.ctx, w.rule.Name, m, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			// The re-admitter's order: into the queue first, then out of the retry stream.
			if _, err := w.q.Enqueue(w.ctx, "orders", m); err != nil {
				done <- err
				return
			}
			if ok, err := w.park.Cancel(w.ctx, "orders", m.ID); !ok || err != nil {
				done <- fmt.Errorf("cancel: %v %v", ok, err)
				return
			}
			done <- nil
		}()
		st, err := w.loc.Get(w.ctx, m.ID)
		if err != nil || (st.State != status.Parked && st.State != status.Queued) {
			t.Fatalf("round %d: %+v %v, want parked or queued", i, st, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := w.get(t, m.ID); st.State != status.Queued {
			t.Fatalf("round %d after the move: %+v", i, st)
		}
	}
}

func mustID(t *testing.T, key string) string {
	t.Helper()
	id, err := queue.NewID("orders", key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A cancel whose delete was carried out and whose answer was lost (the replies dropped
// by a relay between the Locator and NATS, for real) is not answered as "nothing
// happened": the message cannot be seen again either, so the outcome is unknown
// (ErrOutcomeUnknown) — and the message is indeed gone. (A delete never sent, NATS
// stopped under the ingress's connection that keeps no reconnect buffer, is a 503:
// internal/ingress TestAdminPurgeAnswerLostIsOutcomeUnknown shows it for a purge.)
func TestCancelWhoseAnswerIsLostIsUnknown(t *testing.T) {
	t.Parallel()
	var relay *natstest.Relay
	w := newWorldVia(t, func(url string) string {
		relay = natstest.StartRelay(t, url)
		return relay.URL()
	})
	m := w.enqueue(t, "m-1")
	status.SetBeforeDelete(w.loc, func() { relay.DropReplies(true) })
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	_, err := w.loc.Cancel(ctx, m.ID)
	if !errors.Is(err, status.ErrOutcomeUnknown) || errors.Is(err, status.ErrNotCancellable) {
		t.Fatalf("cancel whose answer was lost: %v, want ErrOutcomeUnknown", err)
	}
	_, js := natstest.Connect(t, w.node.URL())
	st, err := js.Stream(w.ctx, w.q.StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(w.ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the stream after the lost answer: %+v %v, want the message deleted", info.State, err)
	}
}
