package drain

// Tracing of claims and deliveries (internal/telemetry). A claim takes many keys at once:
// it is a span of its own (recorded only when it claimed something, so an idle drainer
// traces nothing), and each delivery links to it. A delivery span is the child of the
// message's stored trace context, so it sits in the submitter's trace; the sink call
// carries the delivery span's traceparent.

import (
	"context"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// traceClaim records the span of a claim that started at start and took claimed of asked keys.
func traceClaim(ctx context.Context, r *rules.Rule, start time.Time, claimed, asked int) trace.SpanContext {
	_, span := telemetry.Start(ctx, "claim "+r.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("sluice.rule", r.Name),
			attribute.Int("sluice.claim.keys", claimed),
			attribute.Int("sluice.claim.asked", asked),
		))
	span.End()
	return span.SpanContext()
}

// startDelivery starts the span of one delivery attempt of m, a consumer span (messaging
// semantic conventions) whose parent is the message's trace context, already in ctx.
func (d *Drainer) startDelivery(ctx context.Context, r *rules.Rule, m queue.Message, attempt int, h *heldKey) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", d.cfg.Queues.StreamName(r.Name)),
			attribute.String("messaging.message.id", m.ID),
			attribute.String("sluice.rule", r.Name),
			attribute.String("sluice.message.id", m.ID),
			attribute.Int("sluice.attempt", attempt),
			attribute.Int64("sluice.fence", h.fence),
			sinkTarget(r),
		)}
	if !m.CreatedAt.IsZero() {
		opts = append(opts, trace.WithAttributes(attribute.Float64("sluice.time_in_queue_seconds", time.Since(m.CreatedAt).Seconds())))
	}
	if h.claimSpan.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: h.claimSpan}))
	}
	return telemetry.Start(ctx, "deliver "+r.Name, opts...)
}

// endDelivery ends a delivery span with its outcome.
func endDelivery(span trace.Span, out Outcome) {
	span.SetAttributes(attribute.String("sluice.outcome", out.Verdict.String()),
		attribute.String("sluice.sink.response_class", responseClass(out)))
	if out.Status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", out.Status))
	}
	if out.Verdict != Delivered {
		span.SetStatus(codes.Error, out.Err)
	}
	span.End()
}

// sinkTarget names where a rule delivers, for spans: the HTTP sink's host (never its path
// or query, which may hold a token) or the NATS subject.
func sinkTarget(r *rules.Rule) attribute.KeyValue {
	if r.Sink.URL != "" {
		host := ""
		if u, err := url.Parse(r.Sink.URL); err == nil {
			host = u.Host
		}
		return attribute.String("server.address", host)
	}
	return attribute.String("sluice.sink.subject", r.Sink.NATSSubject)
}
