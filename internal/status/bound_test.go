package status_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/queue"
)

// idAt is id with its uuid v7 part made at t: a made-up id naming the same rule and key.
func idAt(t *testing.T, id string, at time.Time) string {
	t.Helper()
	u := uuid.Must(uuid.NewV7())
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[:6], ms[2:])
	return u.String() + id[36:]
}

// TestALookupReadsABoundedNumberOfMessages: however deep a key's queue, one lookup reads at
// most MaxRead messages of it per look (two looks, plus one read for a position) — a
// made-up id with an old issue time, the worst case, included; a real message is found
// among the messages its key stored from its issue time on, its position still counted
// from the head.
func TestALookupReadsABoundedNumberOfMessages(t *testing.T) {
	w := newWorld(t)
	w.loc.MaxRead, w.loc.Skew = 100, time.Nanosecond // the test's NATS shares the test's clock
	key := "deep merchant"
	var last string
	for i := 0; i < 400; i++ {
		last = w.enqueue(t, key).ID
	}
	target := w.enqueue(t, key) // one more: 400 ahead of it
	w.enqueue(t, key)

	read := func(id string) (int64, error) {
		before := w.loc.MessagesRead()
		_, err := w.loc.Get(w.ctx, id)
		return w.loc.MessagesRead() - before, err
	}
	bound := int64(2*w.loc.MaxRead + 2)

	// Made up, issued an hour ago: the whole queue lies after its issue time.
	n, err := read(idAt(t, last, time.Now().Add(-time.Hour)))
	var gone *status.Gone
	if !errors.As(err, &gone) || !gone.Unread {
		t.Fatalf("made-up old id: %v (%+v), want no longer tracked, queue not read to its end", err, gone)
	}
	if n > bound {
		t.Fatalf("a made-up old id read %d messages, want at most %d", n, bound)
	}
	t.Logf("made-up id issued an hour ago: %d messages read of 402 (bound %d)", n, bound)

	// Made up, issued in the future: nothing of the queue lies after it.
	if n, _ := read(idAt(t, last, time.Now().Add(time.Hour))); n > bound {
		t.Fatalf("a made-up future id read %d messages", n)
	}

	// A real message behind 400 others: found, reading only from its issue time on.
	n, err = read(target.ID)
	if err != nil {
		t.Fatal(err)
	}
	st := w.get(t, target.ID)
	if st.State != status.Queued || st.Position != 400 {
		t.Fatalf("the 401st message: %+v, want queued at position 400", st)
	}
	if n > 50 { // those its key stored in the millisecond its id was issued, and a position read
		t.Fatalf("finding a message behind 400 read %d messages, want a few", n)
	}
	t.Logf("a real message behind 400 others: %d messages read", n)

	// An ingress whose clock runs an hour ahead of NATS's: its message was stored "before"
	// its id was issued, and is found all the same while its key is not deep.
	ahead := w.enqueue(t, "skewed merchant")
	skewed := queue.Message{ID: idAt(t, ahead.ID, time.Now().Add(time.Hour)), Key: "skewed merchant", Payload: []byte(`{}`), CreatedAt: time.Now().UTC()}
	if _, err := w.q.Enqueue(w.ctx, "orders", skewed); err != nil {
		t.Fatal(err)
	}
	if st := w.get(t, skewed.ID); st.State != status.Queued || st.Position != 1 {
		t.Fatalf("a message of a skewed clock: %+v, want queued at position 1", st)
	}
}
