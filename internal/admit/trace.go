package admit

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// tracedEnqueue is the JetStream publish of an admission in a producer span (messaging
// semantic conventions), the child of the admission's span. A full queue is not an error
// of the span: it is the admission's answer.
func (a *Admitter) tracedEnqueue(ctx context.Context, ad *admission) (queue.Enqueued, error) {
	ctx, span := a.startPublish(ctx, ad.r.Name, ad.m.ID)
	enq, err := a.enqueue(ctx, ad)
	endPublish(span, enq, err)
	return enq, err
}

// tracedEnqueueBatch is EnqueueBatch with each message's publish in a producer span, from
// its asynchronous publish to its PubAck.
func (a *Admitter) tracedEnqueueBatch(ctx context.Context, pubs []queue.Publication) {
	spans := make([]trace.Span, len(pubs))
	for i, p := range pubs {
		_, spans[i] = a.startPublish(ctx, p.Rule, p.Msg.ID)
	}
	a.Queues.EnqueueBatch(ctx, pubs)
	for i, p := range pubs {
		endPublish(spans[i], p.Enqueued, p.Err)
	}
}

// startPublish starts the producer span of one message's publish to rule's stream.
func (a *Admitter) startPublish(ctx context.Context, rule, id string) (context.Context, trace.Span) {
	stream := a.Queues.StreamName(rule)
	return telemetry.Start(ctx, "publish "+stream, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "publish"),
			attribute.String("messaging.destination.name", stream),
			attribute.String("sluice.rule", rule),
			attribute.String("sluice.message.id", id),
		))
}

// endPublish ends a publish's span with its outcome.
func endPublish(span trace.Span, enq queue.Enqueued, err error) {
	switch {
	case errors.Is(err, queue.ErrFull):
		span.SetAttributes(attribute.Bool("sluice.queue.full", true))
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(attribute.Int64("messaging.nats.stream.sequence", int64(enq.Seq)), attribute.Bool("sluice.duplicate", enq.Duplicate))
	}
	span.End()
}
