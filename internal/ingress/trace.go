package ingress

// Tracing of submissions (internal/telemetry). With tracing off, handleSubmit is
// submit.Service.HandleSubmit plus one atomic load; the request's traceparent is still stored with the
// message (no allocation: the header's own string), so the sink joins the submitter's trace.

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/telemetry"
)

// handleSubmit is POST /v1/messages: the submission service (internal/submit) inside a server span when tracing is on,
// the child of the request's traceparent.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	if !telemetry.On() {
		s.submits.HandleSubmit(w, r)
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
	s.submits.HandleSubmit(sw, r.WithContext(ctx))
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
	if sw.code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(sw.code))
	}
}
