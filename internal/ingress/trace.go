package ingress

// Tracing of admissions (internal/telemetry). With tracing off, handleSubmit is
// serveSubmit plus one atomic load; the request's traceparent is still stored with the
// message (no allocation: the header's own string), so the sink joins the submitter's trace.

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// Span attributes of sluice's own (besides the HTTP and messaging semantic conventions).
const (
	attrRule      = "sluice.rule"
	attrMessageID = "sluice.message.id"
)

// handleSubmit is POST /v1/messages: serveSubmit inside a server span when tracing is on,
// the child of the request's traceparent.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	if !telemetry.On() {
		s.serveSubmit(w, r)
		return
	}
	parent, state := telemetry.FromHTTP(r.Header)
	ctx := telemetry.Context(r.Context(), parent, state)
	ctx, span := telemetry.Start(ctx, "POST /v1/messages", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", http.MethodPost),
			attribute.String("http.route", "/v1/messages"),
			attribute.String("url.path", r.URL.Path),
		))
	defer span.End()
	sw := &statusWriter{ResponseWriter: w}
	s.serveSubmit(sw, r.WithContext(ctx))
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
	if sw.code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(sw.code))
	}
}

// traceAdmission names the admission's rule and message on the request's span and makes
// the message carry the span's context: the delivery span becomes its child.
func traceAdmission(ctx context.Context, m *queue.Message, rule string) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String(attrRule, rule), attribute.String(attrMessageID, m.ID))
	if parent, state := telemetry.Headers(ctx); parent != "" {
		m.TraceParent, m.TraceState = parent, state
	}
}
