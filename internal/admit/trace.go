package admit

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// tracedEnqueue is the JetStream publish of an admission in a producer span (messaging
// semantic conventions), the child of the admission's span. A full queue is not an error
// of the span: it is the admission's answer.
func (a *Admitter) tracedEnqueue(ctx context.Context, r *rules.Rule, m queue.Message, msgID string) (queue.Enqueued, error) {
	ctx, span := telemetry.Start(ctx, "publish "+a.Queues.StreamName(r.Name), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "publish"),
			attribute.String("messaging.destination.name", a.Queues.StreamName(r.Name)),
			attribute.String("sluice.rule", r.Name),
			attribute.String("sluice.message.id", m.ID),
		))
	defer span.End()
	enq, err := a.Queues.EnqueueAs(ctx, r.Name, m, msgID)
	switch {
	case errors.Is(err, queue.ErrFull):
		span.SetAttributes(attribute.Bool("sluice.queue.full", true))
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(attribute.Int64("messaging.nats.stream.sequence", int64(enq.Seq)), attribute.Bool("sluice.duplicate", enq.Duplicate))
	}
	return enq, err
}
