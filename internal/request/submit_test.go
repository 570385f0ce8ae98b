package request

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/sluice-io/sluice/internal/httpx"
)

// typicalSubmit is a submit body of the size and shape clients send (about 250 bytes).
const typicalSubmit = `{"domain":"webhooks","descriptor":[{"key":"tenant","value":"acme-7f3a"},` +
	`{"key":"endpoint","value":"hooks.example.com/v1/ingest"}],"payload":{"event":"invoice.paid",` +
	`"id":"evt_1NqZ8b2e","amount":12900,"currency":"eur"},"idempotency_key":"evt_1NqZ8b2e"}`

// BenchmarkDecodeSubmit measures the decode of one submission on the admission path:
// DecodeSubmit (the scanner for a plain body like typicalSubmit) against encoding/json.
func BenchmarkDecodeSubmit(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("Content-Type", "application/json")
	body := []byte(typicalSubmit)
	for _, c := range []struct {
		name   string
		decode func(*http.Request, []byte, *Submit) *httpx.Problem
	}{
		{"scanner", DecodeSubmit},
		{"encoding-json", func(r *http.Request, b []byte, req *Submit) *httpx.Problem { return DecodeSubmitJSON(r, b, req) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var req Submit
				if p := c.decode(r, body, &req); p != nil {
					b.Fatal(p.Detail)
				}
			}
		})
	}
}

// FuzzSubmitBody: any body of POST /v1/messages is either refused with a 400 or 415 that
// says why, or decoded into a submission within every documented limit, whose payload is
// valid JSON and does not alias the (pooled, reused) body.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range []string{
		typicalSubmit,
		`{"domain":"d","descriptor":[{"key":"k","value":"v"}],"payload":null}`,
		`{"domain":"d","descriptor":[{"key":"k","value":"😀"}],"payload":[1,{"a":"\u00e9"}],"delay":"90s","ttl":"1h","headers":{"X-Tenant":"t"}}`,
		`{"domain":"d","descriptor":[{"key":"k"}],"payload":1,"deliver_at":"2026-11-26T09:00:00+09:00","expires_at":"2026-11-27T09:00:00Z"}`,
		`{"domain":"d","descriptor":[{"key":"k"}],"payload":1,"time_zone":"Asia/Seoul"}`,
		`{"domain":"d","descriptor":[{"key":"k"}],"payload":1,"time_zone":"Local"}`,
		`{"domain":"d","Domain":"e","payload":1}`,
		`{"domain":"d","descriptor":[],"payload":1} {}`,
		`{"payload":"\ud800"}`,
	} {
		f.Add([]byte(s), "application/json")
	}
	f.Add([]byte(`{}`), "text/plain")
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		r.Header.Set("Content-Type", contentType)
		var req Submit
		_, p := SubmitMediaType(r) // as internal/submit checks it first
		if p == nil {
			p = DecodeSubmit(r, body, &req)
		}
		var want Submit
		if wantP := DecodeSubmitJSON(r, body, &want); !reflect.DeepEqual(req, want) || !reflect.DeepEqual(p, wantP) {
			t.Fatalf("DecodeSubmit %+v %v, encoding/json %+v %v", req, p, want, wantP)
		}
		if p == nil {
			p = req.Validate()
		}
		if p != nil {
			if (p.Status != http.StatusBadRequest && p.Status != http.StatusUnsupportedMediaType) || p.Detail == "" {
				t.Fatalf("a refusal without a reason: %+v", p)
			}
			return
		}
		if req.Domain == "" || len(req.Domain) > MaxDomainBytes || !utf8.ValidString(req.Domain) {
			t.Fatalf("accepted domain %q", req.Domain)
		}
		if len(req.Descriptor) == 0 || len(req.Descriptor) > MaxDescriptorEntries {
			t.Fatalf("accepted %d descriptor entries", len(req.Descriptor))
		}
		for _, e := range req.Descriptor {
			if e.Key == "" || len(e.Key) > MaxKeyBytes || len(e.Value) > MaxKeyBytes || !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
				t.Fatalf("accepted entry %q=%q", e.Key, e.Value)
			}
		}
		if len(req.IdempotencyKey) > MaxIdempotencyKeyBytes || len(req.Headers) > 16 {
			t.Fatalf("accepted idempotency key of %d bytes, %d headers", len(req.IdempotencyKey), len(req.Headers))
		}
		if !json.Valid(req.Payload) {
			t.Fatalf("accepted a payload that is not JSON: %q", req.Payload)
		}
		payload := string(req.Payload)
		for i := range body {
			body[i] = 'x' // the server reuses the body's buffer for the next request
		}
		if string(req.Payload) != payload {
			t.Fatal("the payload aliases the request body")
		}
	})
}
