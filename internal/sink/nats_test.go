package sink

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/rules"
)

func natsRule(subject string) *rules.Rule {
	return &rules.Rule{Name: "orders-per-merchant", Sink: rules.Sink{NATSSubject: subject, Timeout: 2 * time.Second}}
}

func TestNATSCoreSubject(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	nc, _ := natstest.Connect(t, node.URL())
	sub, err := nc.SubscribeSync("orders.accepted")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := NewNATS(nc, NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := testMessage()
	if o := s.Deliver(context.Background(), natsRule("orders.accepted"), m); o.Verdict != delivery.Delivered {
		t.Fatalf("outcome = %+v, want delivered", o)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, m.Payload) {
		t.Errorf("payload = %q, want %q", got.Data, m.Payload)
	}
	for k, v := range map[string]string{
		"Idempotency-Key": m.ID, "Sluice-Message-Id": m.ID, "Sluice-Attempt": "3",
		"Sluice-Rule": "orders-per-merchant", "Sluice-Key": "m%2F42%20caf%C3%A9%20%F0%9F%9A%80",
		"Content-Type": "application/json", "Sluice-Enqueued-At": "2026-11-22T04:53:01.234Z",
		"Sluice-Fence": "1795500000000042",
	} {
		if g := got.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	// Exactly one copy: a core subject must not be published twice by a JetStream attempt.
	if extra, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("subscriber got a second copy: %v", extra.Header)
	}
}

func TestNATSStreamSubjectDedups(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	nc, js := natstest.Connect(t, node.URL())
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ACCEPTED", Subjects: []string{"accepted.>"}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewNATS(nc, NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := testMessage()
	for range 2 { // a redelivery after a crash: same id
		if o := s.Deliver(ctx, natsRule("accepted.orders"), m); o.Verdict != delivery.Delivered {
			t.Fatalf("outcome = %+v, want delivered", o)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream has %d messages, want 1 (deduplicated by message id)", info.State.Msgs)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw.Data, m.Payload) || raw.Header.Get("Sluice-Message-Id") != m.ID {
		t.Errorf("stored message = %q %v", raw.Data, raw.Header)
	}
}

func TestNATSStreamFullIsRetry(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	nc, js := natstest.Connect(t, node.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TINY", Subjects: []string{"tiny"}, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	s, _ := NewNATS(nc, NATSConfig{})
	m := testMessage()
	if o := s.Deliver(ctx, natsRule("tiny"), m); o.Verdict != delivery.Delivered {
		t.Fatalf("first: %+v", o)
	}
	m.ID = "another-id"
	if o := s.Deliver(ctx, natsRule("tiny"), m); o.Verdict != delivery.Retry || o.Err == "" {
		t.Fatalf("full stream: %+v, want retry", o)
	}
}

func TestMultiPicksByRule(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	nc, _ := natstest.Connect(t, node.URL())
	srv, got := recordingServer(t, status(http.StatusOK, nil, ""))
	ns, _ := NewNATS(nc, NATSConfig{})
	mu := Multi{HTTP: newHTTP(t), NATS: ns}
	ctx := context.Background()

	if o := mu.Deliver(ctx, testRule(srv.URL), testMessage()); o.Verdict != delivery.Delivered || len(got()) != 1 {
		t.Errorf("http rule: %+v, %d requests", o, len(got()))
	}
	if o := mu.Deliver(ctx, natsRule("somewhere"), testMessage()); o.Verdict != delivery.Delivered {
		t.Errorf("nats rule: %+v", o)
	}
	if o := mu.Deliver(ctx, &rules.Rule{Name: "x"}, testMessage()); o.Verdict != delivery.Dead {
		t.Errorf("no sink: %+v", o)
	}
	if o := (Multi{HTTP: mu.HTTP}).Deliver(ctx, natsRule("somewhere"), testMessage()); o.Verdict != delivery.Dead {
		t.Errorf("nats not configured: %+v", o)
	}
}
