// Package telemetry sets up OpenTelemetry tracing for a sluice process and carries W3C
// trace context through a message's life: the submit request's traceparent is stored in
// the message's NATS headers (queue.Message.TraceParent), the delivery span is its child,
// and the sink call carries the delivery span's traceparent, so the sink's own span joins
// the submitter's trace.
//
// # When tracing is on
//
// Tracing is off by default: no exporter, no spans, and the hot paths pay one atomic load
// (On) and nothing else. Setup turns it on, with an OTLP exporter, when
//
//   - OTEL_TRACES_EXPORTER is "otlp", or
//   - OTEL_TRACES_EXPORTER is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
//
// and OTEL_SDK_DISABLED is not "true". OTEL_TRACES_EXPORTER=none turns it off; any other
// exporter name is an error (only OTLP is linked in). The OpenTelemetry specification
// defaults OTEL_TRACES_EXPORTER to otlp; sluice does not, so a process with no OTEL_*
// variable never tries to reach a collector on localhost.
//
// Once on, the standard variables apply: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks
// "http/protobuf" (the default) or "grpc"; OTEL_SERVICE_NAME names the service (default:
// the binary's name, "sluice-ingress" or "sluice-drainer"); OTEL_RESOURCE_ATTRIBUTES adds
// resource attributes; OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler
// (default parentbased_always_on). The exporter itself reads its endpoint, headers,
// certificates, compression and timeout from the OTEL_EXPORTER_OTLP_* variables of the
// process environment, as every OTLP exporter does.
//
// # Propagation
//
// W3C trace context (traceparent, tracestate) only, whatever OTEL_PROPAGATORS says: it is
// what the ingress reads, stores and the sinks send. Propagation works even with tracing
// off: a submitter's traceparent is stored with its message and reaches the sink, so the
// sink's span still joins the submitter's trace (with no sluice span between them).
//
// # Globals
//
// The OpenTelemetry API is built around one tracer provider per process; Setup installs
// it (otel.SetTracerProvider) so libraries find it too, and Install is how tests put an
// in-memory exporter in its place. Everything else in sluice reads the provider through
// this package (On, Start).
//
// # Files
//
//   - telemetry.go: tracing on or off from the OTEL_* variables, the exporter and sampler
//   - propagate.go: W3C trace context through HTTP and NATS headers (Sluice-Traceparent)
//   - doc.go: this overview
package telemetry
