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

// Bounds of what is kept of a request's trace context (it is stored with every message):
// a version-00 traceparent is 55 characters, later versions may append fields; W3C asks to
// propagate at least 512 characters of tracestate, and allows dropping it beyond.
const (
	minTraceParent = 55
	maxTraceParent = 128
	maxTraceState  = 512
)

// FromHTTP returns the W3C trace context of an HTTP request's headers (traceparent,
// tracestate), as stored with its message. No allocation: the header values are returned
// as they are, and parsed when used (Context); a traceparent of impossible length is
// dropped (with its tracestate), and so is a tracestate beyond 512 characters.
func FromHTTP(h http.Header) (traceparent, tracestate string) {
	v := h["Traceparent"]
	if len(v) == 0 || len(v[0]) < minTraceParent || len(v[0]) > maxTraceParent {
		return "", ""
	}
	traceparent = v[0]
	if v := h["Tracestate"]; len(v) > 0 && len(v[0]) <= maxTraceState {
		tracestate = v[0]
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
