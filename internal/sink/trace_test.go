package sink

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/telemetry"
)

// A delivery's trace context (the delivery span's, or the message's own with tracing off)
// reaches the sink as W3C traceparent/tracestate: an HTTP header, a NATS header. Without
// one, no header is invented.
const (
	testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTraceState  = "vendor=x"
)

func TestHTTPSendsTraceContext(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := newHTTP(t)
	ctx := telemetry.Context(context.Background(), testTraceParent, testTraceState)
	if o := h.Deliver(ctx, testRule(srv.URL), testMessage()); o.Verdict != delivery.Delivered {
		t.Fatalf("outcome %+v", o)
	}
	if o := h.Deliver(context.Background(), testRule(srv.URL), testMessage()); o.Verdict != delivery.Delivered {
		t.Fatalf("outcome %+v", o)
	}
	reqs := got()
	if g := reqs[0].header.Get("Traceparent"); g != testTraceParent {
		t.Errorf("traceparent = %q, want %q", g, testTraceParent)
	}
	if g := reqs[0].header.Get("Tracestate"); g != testTraceState {
		t.Errorf("tracestate = %q, want %q", g, testTraceState)
	}
	if g, ok := reqs[1].header["Traceparent"]; ok {
		t.Errorf("no trace context, yet traceparent %q", g)
	}
}

func TestNATSSendsTraceContext(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	nc, _ := natstest.Connect(t, node.URL())
	sub, err := nc.SubscribeSync("traced.out")
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
	ctx := telemetry.Context(context.Background(), testTraceParent, testTraceState)
	if o := s.Deliver(ctx, natsRule("traced.out"), testMessage()); o.Verdict != delivery.Delivered {
		t.Fatalf("outcome %+v", o)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// NATS headers are case-sensitive: the W3C names, lower case.
	if g := got.Header.Get("traceparent"); g != testTraceParent {
		t.Errorf("traceparent = %q, want %q (headers %v)", g, testTraceParent, got.Header)
	}
	if g := got.Header.Get("tracestate"); g != testTraceState {
		t.Errorf("tracestate = %q, want %q", g, testTraceState)
	}
}
