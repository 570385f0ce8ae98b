package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of sluice's spans.
const ScopeName = "github.com/sluice-io/sluice"

// ShutdownTimeout bounds the flush of the last spans at shutdown when the caller's
// context has no deadline.
const ShutdownTimeout = 5 * time.Second

// active is the tracer of the installed provider; nil while tracing is off.
var active atomic.Pointer[tracerBox]

type tracerBox struct{ t trace.Tracer }

// On reports whether tracing is on. Hot paths test it before building a span's options,
// so that tracing off costs no allocation.
func On() bool { return active.Load() != nil }

// Start starts a span when tracing is on; otherwise it returns ctx unchanged and a
// non-recording span (no allocation).
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	b := active.Load()
	if b == nil {
		return ctx, noopSpan
	}
	return b.t.Start(ctx, name, opts...)
}

var noopSpan = trace.SpanFromContext(context.Background())

// Install makes tp the process's tracer provider (for sluice and, through otel's global,
// for libraries) and turns tracing on; restore puts back what was there before. Setup
// calls it; tests call it with an in-memory exporter's provider.
func Install(tp trace.TracerProvider) (restore func()) {
	prevTP := otel.GetTracerProvider()
	prevProp := otel.GetTextMapPropagator()
	prev := active.Swap(&tracerBox{t: tp.Tracer(ScopeName)})
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func() {
		active.Store(prev)
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	}
}

// Enabled applies the rule of the package doc: whether tracing is on, and the OTLP
// protocol to export with ("http/protobuf" or "grpc").
func Enabled(getenv func(string) string) (on bool, protocol string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, "", nil
		}
	case "none":
		return false, "", nil
	case "otlp":
	default:
		return false, "", fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: sluice exports traces with \"otlp\" only (or \"none\")", exp)
	}
	protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch protocol {
	case "":
		protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return false, "", fmt.Errorf("telemetry: OTLP protocol %q: want \"http/protobuf\" or \"grpc\"", protocol)
	}
	return true, protocol, nil
}

// Sampler is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name (the
// specification's values; default parentbased_always_on).
func Sampler(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// Setup turns tracing on when the OTEL_* variables (read through getenv) say so, and
// returns the function that flushes and stops it at shutdown. With tracing off it installs
// nothing and shutdown does nothing. service is the default service.name
// (OTEL_SERVICE_NAME wins).
func Setup(ctx context.Context, service string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	on, protocol, err := Enabled(getenv)
	if err != nil || !on {
		return nothing, err
	}
	sampler, err := Sampler(getenv)
	if err != nil {
		return nothing, err
	}
	var exp sdktrace.SpanExporter
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nothing, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	if name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); name != "" {
		service = name
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(resourceAttrs(getenv("OTEL_RESOURCE_ATTRIBUTES"))...),
		resource.WithAttributes(attribute.String("service.name", service)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nothing, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler), sdktrace.WithResource(res))
	restore := Install(tp)
	return func(ctx context.Context) error {
		restore()
		if _, ok := ctx.Deadline(); !ok { // an unreachable collector must not hold the exit
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ShutdownTimeout)
			defer cancel()
		}
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: shutdown: %w", err)
		}
		return nil
	}, nil
}

// resourceAttrs parses OTEL_RESOURCE_ATTRIBUTES ("k=v,k2=v2", values percent-encoded);
// malformed pairs are skipped.
func resourceAttrs(v string) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if u, err := unescape(strings.TrimSpace(val)); err == nil {
			out = append(out, attribute.String(k, u))
		}
	}
	return out
}

// NoopProvider is a provider that records nothing (for tests that want tracing "on" at no cost).
func NoopProvider() trace.TracerProvider { return noop.NewTracerProvider() }
