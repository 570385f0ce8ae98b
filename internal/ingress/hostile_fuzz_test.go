package ingress

import (
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
