package integration_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/telemetry"
)

// ended passes every ended span on, so the test waits for the one it needs.
type ended chan sdktrace.ReadOnlySpan

func (e ended) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e ended) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case e <- s:
	default: // spans of other tests running meanwhile; the exporter keeps them all
	}
}
func (e ended) Shutdown(context.Context) error   { return nil }
func (e ended) ForceFlush(context.Context) error { return nil }

// TestTraceChainSubmitDeliverySink: a submitter's trace runs through sluice to the sink.
// The client's span is the parent of the ingress's POST /v1/messages span, which is the
// parent of the JetStream publish and of the delivery span (through the traceparent
// stored in the message's NATS headers); the sink, a real HTTP server, extracts the
// traceparent sluice sends and its span is the delivery span's child. On the own engine
// (the default) there is no claim span to link to.
//
// Not parallel: it installs the process's tracer provider (an in-memory exporter).
func TestTraceChainSubmitDeliverySink(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	ends := make(ended, 1024)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ends))
	defer tp.Shutdown(context.Background())
	restore := telemetry.Install(tp)
	defer restore()
	tracer := tp.Tracer("test")

	sinkGot := make(chan http.Header, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tracer.Start(ctx, "sink receives", trace.WithSpanKind(trace.SpanKindServer))
		span.End()
		select {
		case sinkGot <- r.Header.Clone():
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	path := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(`
domain: traced
descriptors:
  - key: account
    name: traced
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 50}}
    sink: {url: "`+sink.URL+`/hook"}
`), 0o644)
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	// The submitter: a span of its own, sent as traceparent.
	cctx, client := tracer.Start(context.Background(), "client submits", trace.WithSpanKind(trace.SpanKindClient))
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+m.Addr.String()+"/v1/messages",
		strings.NewReader(`{"domain":"traced","descriptor":[{"key":"account","value":"a-1"}],"payload":{"n":1}}`))
	req.Header.Set("Content-Type", "application/json")
	propagation.TraceContext{}.Inject(cctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.End()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d", resp.StatusCode)
	}
	traceID := client.SpanContext().TraceID()

	var got http.Header
	select {
	case got = <-sinkGot:
	case <-time.After(15 * time.Second):
		t.Fatal("the sink was not called")
	}
	if tp := got.Get("Traceparent"); !strings.Contains(tp, traceID.String()) {
		t.Fatalf("the sink's traceparent %q is not of the submitter's trace %s", tp, traceID)
	}
	// The delivery span ends after the sink answered: wait for it.
	deadline := time.After(15 * time.Second)
	byName := map[string]sdktrace.ReadOnlySpan{}
	for byName["deliver traced"] == nil {
		select {
		case s := <-ends:
			if s.SpanContext().TraceID() == traceID {
				byName[s.Name()] = s
			}
		case <-deadline:
			t.Fatalf("no delivery span of the trace; spans seen: %v", spanNames(byName))
		}
	}
	for _, s := range exp.GetSpans().Snapshots() { // anything of the trace that ended before the wait began
		if s.SpanContext().TraceID() == traceID && byName[s.Name()] == nil {
			byName[s.Name()] = s
		}
	}
	parentOf := func(child, parent string) {
		t.Helper()
		c, p := byName[child], byName[parent]
		if c == nil || p == nil {
			t.Fatalf("spans %q and %q: not both recorded in the trace; seen: %v", child, parent, spanNames(byName))
		}
		if c.Parent().SpanID() != p.SpanContext().SpanID() {
			t.Errorf("span %q's parent is %s, want %q (%s)", child, c.Parent().SpanID(), parent, p.SpanContext().SpanID())
		}
	}
	parentOf("POST /v1/messages", "client submits")
	parentOf("publish SLUICE_Q_traced", "POST /v1/messages")
	parentOf("deliver traced", "POST /v1/messages")
	parentOf("sink receives", "deliver traced")

	d := byName["deliver traced"]
	if d.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("delivery span kind %v", d.SpanKind())
	}
	attrs := map[string]string{}
	for _, kv := range d.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["sluice.rule"] != "traced" || attrs["sluice.outcome"] != "delivered" || attrs["sluice.attempt"] != "1" ||
		attrs["http.response.status_code"] != "204" || attrs["sluice.sink.response_class"] != "2xx" || attrs["sluice.message.id"] == "" {
		t.Errorf("delivery span attributes %v", attrs)
	}
	// The own engine (the default) has no claim span: it owns partitions, and a delivery is
	// only the child of its message's stored context. (The deprecated claim engine's
	// delivery links to the claim that took its key, a trace of its own.)
	if len(d.Links()) != 0 {
		t.Errorf("delivery span links %v, want none on the own engine", d.Links())
	}
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "claim traced" {
			t.Errorf("a claim span on the own engine")
		}
	}
}

func spanNames(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
