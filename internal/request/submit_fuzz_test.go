package request

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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

// FuzzCheckHeaders: CheckHeaders never panics; what it accepts is a valid HTTP field (RFC
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
		out, p := CheckHeaders(in)
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

// FuzzSplitBatch: SplitBatch never panics on a batch body; what it accepts are non-empty
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
		items, p := SplitBatch(body)
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

// FuzzDecodeBatch: a batch body (a JSON array or NDJSON) is decoded without a server, as
// the submission service decodes it. It never panics; the whole batch is refused (400 or
// 413, with a reason) or every item has its own answer: a 400 that says why, or a
// submission that validates, with a domain, a descriptor and a JSON payload.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range []string{
		`[` + typicalSubmit + `,` + typicalSubmit + `]`,
		typicalSubmit + "\n" + typicalSubmit + "\n",
		`[{"domain":"d","descriptor":[{"key":"k","value":"v"}],"payload":1,"idempotency_key":""}]`,
		`[{"domain":"d","descriptor":[{"key":"k","value":"v"}],"payload":1,"headers":{"Host":"x"}}, 1, {}]`,
		`[{"domain":"d","descriptor":[{"key":"k","value":"v"}],"payload":1,"delay":"-1s"}]`,
		`[]`, "\n\n", `[1,]`, "{\"domain\":\"\xff\"}\n",
	} {
		f.Add([]byte(s))
	}
	const max = 20
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, problems, p := DecodeBatch(body, max, nil)
		if p != nil {
			if (p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge) || p.Detail == "" {
				t.Fatalf("a batch refused without a reason: %+v", p)
			}
			return
		}
		if len(reqs) == 0 || len(reqs) > max || len(problems) != len(reqs) {
			t.Fatalf("%d items, %d problems (at most %d items)", len(reqs), len(problems), max)
		}
		for i := range reqs {
			p := problems[i]
			if p == nil {
				p = reqs[i].Validate()
			}
			if p != nil {
				if p.Status != http.StatusBadRequest || p.Detail == "" {
					t.Fatalf("item %d refused without a reason: %+v", i, p)
				}
				continue
			}
			if reqs[i].Domain == "" || len(reqs[i].Descriptor) == 0 || !json.Valid(reqs[i].Payload) {
				t.Fatalf("item %d accepted as %+v", i, reqs[i])
			}
		}
	})
}
