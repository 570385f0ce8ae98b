package submit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// Span attributes of sluice's own (besides the HTTP and messaging semantic conventions).
const (
	attrRule      = "sluice.rule"
	attrMessageID = "sluice.message.id"
)

// traceAdmission names the admission's rule and message on the request's span and makes
// the message carry the span's context: the delivery span becomes its child.
func traceAdmission(ctx context.Context, m *queue.Message, rule string) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String(attrRule, rule), attribute.String(attrMessageID, m.ID))
	if parent, state := telemetry.Headers(ctx); parent != "" {
		m.TraceParent, m.TraceState = parent, state
	}
}
