package telemetry

import (
	"context"
	"net/http"
	"net/url"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C trace context header names, as sent to HTTP sinks and in NATS headers.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

var w3c = propagation.TraceContext{}

// pair is a two-header carrier with no map behind it.
type pair struct{ parent, state string }

func (p *pair) Get(k string) string {
	switch k {
	case HeaderTraceParent:
		return p.parent
	case HeaderTraceState:
		return p.state
	}
	return ""
}

func (p *pair) Set(k, v string) {
	switch k {
	case HeaderTraceParent:
		p.parent = v
	case HeaderTraceState:
		p.state = v
	}
}

func (p *pair) Keys() []string { return []string{HeaderTraceParent, HeaderTraceState} }

// FromHTTP returns the W3C trace context of an HTTP request's headers (traceparent,
// tracestate), as stored with its message. No allocation: the header values are returned
// as they are, and checked when used (Context).
func FromHTTP(h http.Header) (traceparent, tracestate string) {
	if v := h["Traceparent"]; len(v) > 0 {
		traceparent = v[0]
		if v := h["Tracestate"]; len(v) > 0 {
			tracestate = v[0]
		}
	}
	return traceparent, tracestate
}

// Context returns ctx with the remote span context of (traceparent, tracestate) as its
// parent; ctx unchanged when traceparent is empty or invalid.
func Context(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &pair{parent: traceparent, state: tracestate})
}

// Headers returns the W3C trace context of the span in ctx; empty strings when ctx has no
// valid span context.
func Headers(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	var p pair
	w3c.Inject(ctx, &p)
	return p.parent, p.state
}

// Inject calls set for the traceparent (and tracestate) of the span in ctx; nothing when
// ctx has no valid span context. set is an http.Header's or nats.Header's Set.
func Inject(ctx context.Context, set func(k, v string)) {
	parent, state := Headers(ctx)
	if parent == "" {
		return
	}
	set(HeaderTraceParent, parent)
	if state != "" {
		set(HeaderTraceState, state)
	}
}

func unescape(s string) (string, error) { return url.PathUnescape(s) }
