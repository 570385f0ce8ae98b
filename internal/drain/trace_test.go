package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

const submitterParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// enqueueTraced enqueues a message that carries a submitter's trace context (as an
// ingress that does not trace stores it).
func (e *env) enqueueTraced(r *rules.Rule, key string) queue.Message {
	e.t.Helper()
	m := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Rule: r.Name, Key: key, Payload: []byte(`1`),
		CreatedAt: time.Now(), TraceParent: submitterParent}
	if _, err := e.q.Enqueue(context.Background(), r.Name, m); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Claims.MarkDue(context.Background(), r.Name, key); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// sinkContexts is a sink that records the span context each delivery was given.
func sinkContexts(got chan<- trace.SpanContext) *recSink {
	return &recSink{fn: func(ctx context.Context, m queue.Message, n int) drain.Outcome {
		got <- trace.SpanContextFromContext(ctx)
		return drain.OutcomeDelivered()
	}}
}

// With tracing on, the delivery span is the child of the message's stored context (here
// the submitter's own span: the ingress did not trace), and the sink is given the
// delivery span's context. Not parallel: it installs the process's tracer provider.
func TestDeliverySpanIsChildOfTheStoredContext(t *testing.T) {
	ends := make(endedSpans, 64)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ends))
	defer tp.Shutdown(context.Background())
	defer telemetry.Install(tp)()

	e := newEnv(t)
	r := e.rule("traced-drain", 1000, 0, nil)
	m := e.enqueueTraced(r, "k")
	got := make(chan trace.SpanContext, 1)
	e.drainer(context.Background(), sinkContexts(got), nil)
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered")
	}
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the sink's trace %s is not the submitter's", sc.TraceID())
	}
	var deliver sdktrace.ReadOnlySpan
	for deliver == nil { // the span ends just after the sink returns
		select {
		case sp := <-ends:
			if sp.Name() == "deliver traced-drain" {
				deliver = sp
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery span")
		}
	}
	if deliver.Parent().SpanID().String() != "00f067aa0ba902b7" || !deliver.Parent().IsRemote() {
		t.Errorf("delivery span's parent %v, want the submitter's span 00f067aa0ba902b7", deliver.Parent())
	}
	if deliver.SpanContext().SpanID() != sc.SpanID() {
		t.Errorf("the sink was given span %s, want the delivery span %s", sc.SpanID(), deliver.SpanContext().SpanID())
	}
	var id string
	for _, kv := range deliver.Attributes() {
		if kv.Key == "sluice.message.id" {
			id = kv.Value.AsString()
		}
	}
	if id != m.ID {
		t.Errorf("delivery span's message id %q, want %q", id, m.ID)
	}
}

// With tracing off, the sink is still given the message's stored context, unchanged: the
// sink's span joins the submitter's trace with no sluice span between.
func TestTracingOffPassesTheStoredContextThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("untraced-drain", 1000, 0, nil)
	e.enqueueTraced(r, "k")
	got := make(chan trace.SpanContext, 1)
	e.drainer(context.Background(), sinkContexts(got), nil)
	select {
	case sc := <-got:
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("the sink was given %v, want the submitter's span context", sc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered")
	}
}

// endedSpans passes ended spans on (a span processor), so a test waits for the one it needs.
type endedSpans chan sdktrace.ReadOnlySpan

func (e endedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case e <- s:
	default:
	}
}
func (e endedSpans) Shutdown(context.Context) error   { return nil }
func (e endedSpans) ForceFlush(context.Context) error { return nil }
