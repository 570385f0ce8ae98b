package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/telemetry"
)

// BenchmarkSubmit is one admission through the ingress's handler, in process (no client,
// no socket): decode, match, Redis count (batched), JetStream publish, 202. It is what
// tracing must not make dearer when it is off (allocs/op). "traceparent" sends a W3C
// traceparent header, which is stored with the message even with tracing off;
// "tracing-on" records every span (an SDK provider without exporter), for comparison.
func BenchmarkSubmit(b *testing.B) {
	n := natstest.Start(b)
	r := redistest.Start(b, redistest.Options{})
	path := filepath.Join(b.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10000, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL()},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	const keys = 4096
	bodies := make([][]byte, keys)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":{"order":"%0100d"}}`, i, i)
	}
	tp := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	for _, bm := range []struct {
		name   string
		header http.Header
		traced bool
	}{
		{"plain", nil, false},
		{"traceparent", tp, false},
		{"tracing-on", tp, true},
	} {
		b.Run(bm.name, func(b *testing.B) {
			if bm.traced {
				provider := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				defer provider.Shutdown(context.Background())
				defer telemetry.Install(provider)()
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(bodies[i%keys]))
				req.Header.Set("Content-Type", "application/json")
				for k, v := range bm.header {
					req.Header[k] = v
				}
				w := httptest.NewRecorder()
				m.Server.ServeHTTP(w, req)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
				i++
			}
		})
	}
}
