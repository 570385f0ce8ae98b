package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-io/sluice/internal/telemetry"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestEnabledRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		getenv   func(string) string
		on       bool
		protocol string
		err      bool
	}{
		{"nothing set: off", env(), false, "", false},
		{"exporter otlp", env("OTEL_TRACES_EXPORTER", "otlp"), true, "http/protobuf", false},
		{"endpoint alone", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"), true, "http/protobuf", false},
		{"traces endpoint alone", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"), true, "http/protobuf", false},
		{"endpoint but exporter none", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_EXPORTER", "none"), false, "", false},
		{"sdk disabled wins", env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_SDK_DISABLED", "true"), false, "", false},
		{"grpc", env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), true, "grpc", false},
		{"traces protocol wins", env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), true, "http/protobuf", false},
		{"unknown exporter", env("OTEL_TRACES_EXPORTER", "zipkin"), false, "", true},
		{"unknown protocol", env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), false, "", true},
	} {
		on, protocol, err := telemetry.Enabled(tc.getenv)
		if on != tc.on || protocol != tc.protocol || (err != nil) != tc.err {
			t.Errorf("%s: Enabled = %v, %q, %v; want %v, %q, error %v", tc.name, on, protocol, err, tc.on, tc.protocol, tc.err)
		}
	}
}

func TestSampler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, arg string
		desc      string // the SDK's description of the sampler
		err       bool
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}", false},
		{"always_off", "", "AlwaysOffSampler", false},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}", false},
		{"traceidratio", "2", "", true},
		{"sometimes", "", "", true},
	} {
		s, err := telemetry.Sampler(env("OTEL_TRACES_SAMPLER", tc.name, "OTEL_TRACES_SAMPLER_ARG", tc.arg))
		if (err != nil) != tc.err || (err == nil && s.Description() != tc.desc) {
			t.Errorf("Sampler(%q, %q) = %v, %v; want %q, error %v", tc.name, tc.arg, s, err, tc.desc, tc.err)
		}
	}
}

// Not parallel: it asserts that nothing is installed, and measures allocations.
func TestOffByDefaultInstallsNothing(t *testing.T) {
	shutdown, err := telemetry.Setup(context.Background(), "test", env())
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if telemetry.On() {
		t.Error("tracing on with no OTEL_* variable")
	}
	ctx, span := telemetry.Start(context.Background(), "x")
	if span.IsRecording() || trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Error("off: Start returned a live span")
	}
	if n := testing.AllocsPerRun(100, func() { telemetry.Start(ctx, "x") }); n != 0 {
		t.Errorf("off: Start allocates %v times", n)
	}
}

func TestContextRoundTrip(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.Context(context.Background(), parent, "vendor=x")
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
		t.Fatalf("span context %v", sc)
	}
	p, s := telemetry.Headers(ctx)
	if p != parent || s != "vendor=x" {
		t.Errorf("Headers = %q, %q", p, s)
	}
	if ctx := telemetry.Context(context.Background(), "not a traceparent", ""); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("an invalid traceparent gave a span context")
	}
	h := http.Header{}
	telemetry.Inject(context.Background(), h.Set)
	if len(h) != 0 {
		t.Errorf("no span: Inject set %v", h)
	}
}

// TestSetupExportsOverOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, a span reaches the
// collector (an httptest server) over OTLP/HTTP when tracing shuts down.
func TestSetupExportsOverOTLP(t *testing.T) {
	var got atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" && len(b) > 0 {
			got.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // the exporter reads the process environment
	shutdown, err := telemetry.Setup(context.Background(), "sluice-test", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !telemetry.On() {
		t.Fatal("tracing off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	_, span := telemetry.Start(context.Background(), "test span")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() == 0 {
		t.Error("the collector received no spans")
	}
	if telemetry.On() {
		t.Error("tracing still on after shutdown")
	}
}

func TestFromHTTPBounds(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name          string
		h             http.Header
		parent, state string
	}{
		{"none", http.Header{}, "", ""},
		{"both", http.Header{"Traceparent": {parent}, "Tracestate": {"a=1"}}, parent, "a=1"},
		{"short traceparent", http.Header{"Traceparent": {"00-1-2-01"}, "Tracestate": {"a=1"}}, "", ""},
		{"long traceparent", http.Header{"Traceparent": {parent + strings.Repeat("-x", 40)}}, "", ""},
		{"long tracestate", http.Header{"Traceparent": {parent}, "Tracestate": {strings.Repeat("a", 513)}}, parent, ""},
		{"tracestate alone", http.Header{"Tracestate": {"a=1"}}, "", ""},
	} {
		p, s := telemetry.FromHTTP(tc.h)
		if p != tc.parent || s != tc.state {
			t.Errorf("%s: FromHTTP = %q, %q; want %q, %q", tc.name, p, s, tc.parent, tc.state)
		}
	}
}
