package ingress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/rules"
)

// rfcFieldName is RFC 9110's field-name (a token), written out here rather than borrowed
// from the code under test.
func rfcFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// rfcFieldValue is RFC 9110's field-value: field-vchars (VCHAR or obs-text) with spaces and
// tabs only between them.
func rfcFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' {
			if i == 0 || i == len(s)-1 {
				return false
			}
			continue
		}
		if c < 0x21 || c == 0x7f {
			return false
		}
	}
	return true
}

// FuzzCheckHeaders: checkHeaders never panics; what it accepts is a valid HTTP field (RFC
// 9110), within every limit, never a name sluice keeps for itself, and survives being
// written on the wire and read back by net/http unchanged.
func FuzzCheckHeaders(f *testing.F) {
	f.Add("X-Tenant", "acme", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("x-a", " padded\t", "sluice-signature", "forged")
	f.Add("content-type", "text/plain", "NATS-Msg-Id", "1")
	f.Add("X-A", "1", "x-a", "2")
	f.Add("X-Pad", " padded\t", "X-B", "b")
	f.Add("Bad Name", "v", "X-Ok", "line\r\nInjected: yes")
	f.Add("X-Utf8", "caf\xc3\xa9", "Host", "evil")
	f.Add("", "", "Transfer-Encoding", "chunked")
	f.Add("authorization", "Bearer forged", "X-Forwarded-For", "10.0.0.1")
	f.Add("Proxy-Authorization", "Basic x", "cookie", "session=1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		out, p := checkHeaders(in)
		if p != nil {
			if p.Status != http.StatusBadRequest || p.Field == "" || p.Detail == "" {
				t.Fatalf("a refusal that names no field or reason: %+v", p)
			}
			return
		}
		if len(out) != len(in) {
			t.Fatalf("%d headers in, %d out", len(in), len(out))
		}
		total := 0
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		for name, v := range out {
			total += len(name) + len(v)
			if !rfcFieldName(name) || len(name) > MaxHeaderNameBytes || http.CanonicalHeaderKey(name) != name {
				t.Fatalf("accepted header name %q", name)
			}
			if !rfcFieldValue(v) || len(v) > MaxHeaderValueBytes {
				t.Fatalf("accepted value %q of %q: not an RFC 9110 field value", v, name)
			}
			lower := strings.ToLower(name)
			if strings.HasPrefix(lower, "sluice-") || strings.HasPrefix(lower, "nats-") {
				t.Fatalf("accepted reserved header %q", name)
			}
			for _, d := range []string{"host", "content-length", "content-type", "content-encoding", "transfer-encoding",
				"connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection", "expect", "idempotency-key",
				"authorization", "cookie", "forwarded", "x-real-ip"} {
				if lower == d {
					t.Fatalf("accepted denied header %q", name)
				}
			}
			if strings.HasPrefix(lower, "proxy-") || strings.HasPrefix(lower, "x-forwarded-") {
				t.Fatalf("accepted a credential or forwarding header %q", name)
			}
			req.Header.Set(name, v)
		}
		if total > MaxHeadersBytes {
			t.Fatalf("accepted %d bytes of headers", total)
		}
		var wire bytes.Buffer
		if err := req.Write(&wire); err != nil {
			t.Fatalf("accepted headers do not write: %v", err)
		}
		back, err := http.ReadRequest(bufio.NewReader(&wire))
		if err != nil {
			t.Fatalf("accepted headers %q do not read back: %v", out, err)
		}
		for name, v := range out {
			if got := back.Header.Values(name); len(got) != 1 || got[0] != v {
				t.Fatalf("header %q = %q went over the wire as %q", name, v, got)
			}
		}
	})
}

// FuzzSplitBatch: splitBatch never panics on a batch body; what it accepts are non-empty
// items, each valid JSON for an array body, each one trimmed line for NDJSON, never more
// items than the body has bytes.
func FuzzSplitBatch(f *testing.F) {
	for _, s := range []string{
		`[` + typicalSubmit + `,` + typicalSubmit + `]`,
		typicalSubmit + "\n" + typicalSubmit + "\r\n\n",
		` [1, "x", {"a":[]}, null]`, `[`, `[1,]`, "{\"a\":1}\n{", "\n\n", "[] x", "\xff\n\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, p := splitBatch(body)
		if p != nil {
			if p.Status != http.StatusBadRequest || p.Detail == "" {
				t.Fatalf("a refusal without a reason: %+v", p)
			}
			return
		}
		if len(items) > len(body) {
			t.Fatalf("%d items from %d bytes", len(items), len(body))
		}
		array := len(bytes.TrimLeft(body, " \t\r\n")) > 0 && bytes.TrimLeft(body, " \t\r\n")[0] == '['
		for i, it := range items {
			if len(it) == 0 {
				t.Fatalf("item %d is empty", i)
			}
			if array && !json.Valid(it) {
				t.Fatalf("item %d %q of an array is not JSON", i, it)
			}
			if !array && (bytes.ContainsAny(it, "\n") || len(bytes.TrimSpace(it)) != len(it) || !bytes.Contains(body, it)) {
				t.Fatalf("NDJSON item %d %q is not a trimmed line of the body", i, it)
			}
		}
	})
}

// fuzzSubmitRules: domains orders and other, each with a rule that has no queue, so that
// an item reaching rule matching is answered 404 naming its rule and nothing is admitted.
const fuzzSubmitRules = `
domain: orders
descriptors:
  - key: merchant_id
    name: orders-check
    rate_limit: {unit: minute, requests_per_unit: 2}
---
domain: other
descriptors:
  - key: merchant_id
    name: other-check
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// FuzzSubmitBatch: POST /v1/messages through the server's own handler — submit token,
// media type, batch decoding (JSON array and NDJSON), the authorization of every item, each
// item's validation and rule matching — with a token that may submit to domain orders only.
// It never panics nor answers 5xx; every refusal is problem+json, a 403 or 415 naming its
// field; and no submission of another domain ever reaches rule matching (a 404 or an item's
// 404 always concerns orders), whatever the body and Content-Type.
func FuzzSubmitBatch(f *testing.F) {
	item := func(domain, extra string) string {
		return `{"domain":"` + domain + `","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}` + extra + `}`
	}
	for _, c := range []struct{ body, ct string }{
		{"[" + item("orders", "") + "]", "application/json"},
		{"[" + item("other", "") + "]", "application/json"},
		{"[" + item("orders", "") + "," + item("other", `,"idempotency_key":"k"`) + "]", "application/json; charset=utf-8"},
		{item("orders", "") + "\n" + item("other", "") + "\n", "application/x-ndjson"},
		{item("other", "") + "\n", "application/jsonl"},
		{item("other", ""), "application/json"},
		{item("orders", `,"headers":{"Authorization":"x"}`), "application/json"},
		{"[" + item("orders", `,"Domain":"other"`) + "]", "application/json"},
		{`[{"DOMAIN":"other","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}]`, "application/json"},
		{`[{"domain":"orders","domain":"other","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}]`, "application/json"},
		{`[{"domain":"oth\u0065r","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}]`, "application/json"},
		{"[" + item("other", "") + "]", "text/plain"},
		{"[" + item("other", "") + "]", ""},
		{`{"domain":"orders","Domain":"other","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}`, "application/json"},
		{"[1, {}, null]", "application/json"},
		{"\n\n", "application/x-ndjson"},
	} {
		f.Add([]byte(c.body), c.ct)
	}
	set, err := rules.Parse("fuzz.yaml", []byte(fuzzSubmitRules))
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "submit-tokens")
	const secret = "orders-only-0123456789abcdef"
	if err := os.WriteFile(path, []byte("orders-only submit:orders "+secret+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	tokens, err := OpenTokenFile("-submit-tokens", path, false, nil)
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(ServerConfig{Rules: func() *rules.Set { return set }, Auth: &Auth{Submit: tokens}, MaxBatch: 50,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	forbiddenField := regexp.MustCompile(`^(domain|\[[0-9]+\]\.domain)$`)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		r.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		raw := w.Body.String()
		if w.Code >= 500 {
			t.Fatalf("%d %s", w.Code, raw)
		}
		if strings.Contains(raw, "other-check") || strings.Contains(raw, `domain \"other\" matches`) {
			t.Fatalf("a submission to domain other reached rule matching: %d %s", w.Code, raw)
		}
		if w.Code == http.StatusOK {
			var a struct{ Items []map[string]any }
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || len(a.Items) == 0 || len(a.Items) > 50 {
				t.Fatalf("batch answer %s: %v", raw, err)
			}
			for i, it := range a.Items {
				if it["status"] == float64(404) && !strings.Contains(fmt.Sprint(it["detail"]), `"orders`) {
					t.Fatalf("item %d reached rule matching for another domain: %v", i, it)
				}
			}
			return
		}
		var p struct{ Field, Detail string }
		if w.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Detail == "" {
			t.Fatalf("a refusal that is not a problem: %d %v %s", w.Code, w.Header(), raw)
		}
		switch w.Code {
		case http.StatusForbidden:
			if !forbiddenField.MatchString(p.Field) {
				t.Fatalf("403 naming %q: %s", p.Field, raw)
			}
		case http.StatusUnsupportedMediaType:
			if p.Field != "Content-Type" {
				t.Fatalf("415 naming %q: %s", p.Field, raw)
			}
		case http.StatusNotFound:
			if !strings.Contains(p.Detail, `"orders`) {
				t.Fatalf("a submission to another domain reached rule matching: %s", raw)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d: %s", w.Code, raw)
		}
	})
}
