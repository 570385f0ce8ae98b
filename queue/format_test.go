package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/queue"
)

// The stored format's version: written as "2", read from 1 (no header, what v0.3.0
// wrote) to 2, refused above as a bad message that names the reason.
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
		{"3", "written by a newer sluice"},
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
