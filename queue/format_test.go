package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/queue"
)

// The stored format's version: the full form written as "2", read from 1 (no header, what
// v0.3.0 wrote) to 3 (the lean form, which needs its stream's context), refused above as a
// bad message that names the reason.
func TestMessageFormatVersion(t *testing.T) {
	t.Parallel()
	nm := queue.EncodeMessage("q.r.x", queue.Message{ID: "id-1", Rule: "r", Key: "k", Payload: []byte(`{}`)})
	if got := nm.Header.Get("Sluice-Format"); got != "2" {
		t.Errorf("Sluice-Format = %q, want 2", got)
	}
	// A v0.3.0 message, header by header as that release wrote it.
	v1 := nats.Header{"Nats-Msg-Id": {"id-1"}, "Sluice-Rule": {"r"}, "Sluice-Key": {"a%2Fb"},
		"Sluice-Created-At": {"2026-01-02T03:04:05.000000006Z"}, "Sluice-Attempt": {"2"}}
	m, err := queue.DecodeMessage(v1, []byte(`{"x":1}`))
	if err != nil || m.ID != "id-1" || m.Key != "a/b" || m.Attempt != 2 || string(m.Payload) != `{"x":1}` {
		t.Errorf("format 1: %+v, %v", m, err)
	}
	for _, tc := range []struct {
		v    string
		want string // "" = accepted
	}{
		{"1", ""},
		{"2", ""},
		{"3", "read without its stream's rule and time"}, // the lean form: DecodeStored
		{"4", "written by a newer sluice"},
		{"10", "written by a newer sluice"},
		{"0", "not a format version"},
		{"two", "not a format version"},
	} {
		h := nats.Header{}
		for k, vs := range v1 {
			h[k] = vs
		}
		h.Set("Sluice-Format", tc.v)
		_, err := queue.DecodeMessage(h, []byte(`{}`))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Sluice-Format %s: %v", tc.v, err)
		case tc.want != "" && (!errors.Is(err, queue.ErrBadMessage) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Sluice-Format %s: err %v, want ErrBadMessage saying %q", tc.v, err, tc.want)
		}
	}
}

// A v0.3.0 ingress rewrites a queue stream without AllowDirect when it starts (a rolling
// upgrade); a Queues that cached the stream with direct gets must still pop its messages.
func TestPopAfterAnOldIngressTurnedDirectGetsOff(t *testing.T) {
	t.Parallel()
	q, rule, js := newQueues(t, 10)
	ctx := context.Background()
	for _, p := range []string{`{"n":1}`, `{"n":2}`} {
		if _, err := q.Enqueue(ctx, rule, msg("k", p)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := q.Pop(ctx, rule, "k") // caches the handle, AllowDirect on
	if err != nil || string(first.Payload) != `{"n":1}` {
		t.Fatalf("first pop: %s, %v", first.Payload, err)
	}
	s, err := js.Stream(ctx, q.StreamName(rule))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		t.Fatalf("the queue stream does not allow direct gets to begin with")
	}
	cfg.AllowDirect = false // what v0.3.0's StreamConfig writes
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	next, err := q.PopAfter(ctx, rule, "k", first.Seq)
	if err != nil || string(next.Payload) != `{"n":2}` {
		t.Fatalf("pop after direct gets were turned off: %s, %v", next.Payload, err)
	}
}

// A submission's first admission (EnqueueNew) is stored lean — its id alone, no rule, key
// or creation time in its headers — and read back whole, by a pop and by a status lookup:
// the rule from the stream, the key from the subject, the creation time from the stream's
// stamp. A message with anything to carry (an attempt, a parking) keeps the full form.
func TestLeanFormRoundTrip(t *testing.T) {
	t.Parallel()
	q, rule, js := newQueues(t, 10)
	ctx := context.Background()
	for _, key := range weirdKeys {
		m := msg(key, `{"k":1}`)
		m.Headers = map[string]string{"X-Tenant": "t1"}
		m.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Millisecond)
		before := time.Now()
		enq, err := q.EnqueueNew(ctx, rule, m)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		s, err := js.Stream(ctx, q.StreamName(rule))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := s.GetMsg(ctx, enq.Seq)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{queue.HeaderRule, queue.HeaderKey, queue.HeaderCreatedAt} {
			if v := raw.Header.Get(h); v != "" {
				t.Errorf("key %q: the lean form has %s: %q", key, h, v)
			}
		}
		if v := raw.Header.Get(queue.HeaderFormat); v != "3" {
			t.Errorf("key %q: Sluice-Format %q, want 3", key, v)
		}
		check := func(how string, got queue.Message) {
			t.Helper()
			if got.ID != m.ID || got.Rule != rule || got.Key != key || string(got.Payload) != `{"k":1}` ||
				got.Headers["X-Tenant"] != "t1" || !got.ExpiresAt.Equal(m.ExpiresAt) {
				t.Errorf("key %q, %s: %+v", key, how, got)
			}
			if issued, ok := queue.IssuedAt(m.ID); !ok || !got.CreatedAt.Equal(issued) {
				t.Errorf("key %q, %s: created at %v, want when its id was issued (%v, %v)", key, how, got.CreatedAt, issued, ok)
			}
			if got.CreatedAt.Before(before.Add(-time.Second)) || got.CreatedAt.After(time.Now()) {
				t.Errorf("key %q, %s: created at %v, want about %v", key, how, got.CreatedAt, before)
			}
		}
		f, err := q.Find(ctx, rule, key, m.ID)
		if err != nil {
			t.Fatalf("key %q: find: %v", key, err)
		}
		check("find", f.Message)
		// A reader of the subject alone (no rule at hand) still gets the key and the time.
		f, err = queue.FindInSubject(ctx, js.Conn(), "$JS.API.", q.StreamName(rule), q.Subject(rule, key), m.ID)
		if err != nil {
			t.Fatalf("key %q: find in subject: %v", key, err)
		}
		f.Message.Rule = rule // the one thing only the caller knows
		check("find in subject", f.Message)
		p, err := q.Pop(ctx, rule, key)
		if err != nil {
			t.Fatalf("key %q: pop: %v", key, err)
		}
		check("pop", p.Message)
		if err := q.Delete(ctx, rule, p.Seq); err != nil {
			t.Fatal(err)
		}
		if _, err := queue.DecodeMessage(raw.Header, raw.Data); !errors.Is(err, queue.ErrBadMessage) {
			t.Errorf("key %q: DecodeMessage of the lean form without its stream: %v, want ErrBadMessage", key, err)
		}
	}
	// A retried message has its attempt to carry: the full form, even through EnqueueNew.
	m := msg("k", `{}`)
	m.Attempt = 2
	enq, err := q.EnqueueNew(ctx, rule, m)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, q.StreamName(rule))
	raw, err := s.GetMsg(ctx, enq.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get(queue.HeaderFormat) != "2" || raw.Header.Get(queue.HeaderKey) != "k" {
		t.Errorf("a retried message through EnqueueNew: headers %v, want the full form", raw.Header)
	}
}

// A batch's submissions (EnqueueBatch with New) are stored lean as EnqueueNew stores them;
// one with an attempt to carry, or published under another Nats-Msg-Id, in the full form.
func TestLeanFormInBatches(t *testing.T) {
	t.Parallel()
	q, rule, js := newQueues(t, 10)
	ctx := context.Background()
	retried := msg("b", `{"n":2}`)
	retried.Attempt = 1
	pubs := []queue.Publication{
		{Rule: rule, Msg: msg("b", `{"n":1}`), New: true},
		{Rule: rule, Msg: retried, New: true},
		{Rule: rule, Msg: msg("b", `{"n":3}`), New: true, MsgID: "another-id"},
		{Rule: rule, Msg: msg("b", `{"n":4}`)},
	}
	q.EnqueueBatch(ctx, pubs)
	s, err := js.Stream(ctx, q.StreamName(rule))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"3", "2", "2", "2"} {
		if pubs[i].Err != nil {
			t.Fatalf("publication %d: %v", i, pubs[i].Err)
		}
		raw, err := s.GetMsg(ctx, pubs[i].Enqueued.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := raw.Header.Get(queue.HeaderFormat); got != want {
			t.Errorf("publication %d: Sluice-Format %q, want %s", i, got, want)
		}
	}
	for i := range pubs {
		p, err := q.Pop(ctx, rule, "b")
		if err != nil {
			t.Fatal(err)
		}
		if p.Rule != rule || p.Key != "b" || p.ID != pubs[i].Msg.ID || p.CreatedAt.IsZero() {
			t.Errorf("pop %d: %+v", i, p.Message)
		}
		if err := q.Delete(ctx, rule, p.Seq); err != nil {
			t.Fatal(err)
		}
	}
}

// IssuedAt reads the milliseconds of an id's uuid v7, and nothing from anything else.
func TestIssuedAt(t *testing.T) {
	t.Parallel()
	before := time.Now().Truncate(time.Millisecond)
	id, err := queue.NewID("r", "k")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := queue.IssuedAt(id)
	if !ok || got.Before(before) || got.After(time.Now()) {
		t.Errorf("IssuedAt(%q) = %v, %v; want between %v and now", id, got, ok, before)
	}
	if got, ok := queue.IssuedAt("0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"); !ok || got.UnixMilli() != 0x0193a1b27c3d {
		t.Errorf("a fixed id: %v (%d ms), %v", got, got.UnixMilli(), ok)
	}
	for _, bad := range []string{"", "x", "0193a1b2-7c3d-4e4f-8a9b-0c1d2e3f4a5b" /* v4 */, "0193A1B2-7c3d-7e4f-8a9b-0c1d2e3f4a5b" /* upper case */, "0193a1b2+7c3d-7e4f-8a9b-0c1d2e3f4a5b"} {
		if _, ok := queue.IssuedAt(bad); ok {
			t.Errorf("IssuedAt(%q) ok", bad)
		}
	}
}
