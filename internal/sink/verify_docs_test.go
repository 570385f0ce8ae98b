package sink

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/sign"
)

// docBlock returns the first fenced block of lang in docs/delivery.md that contains marker.
func docBlock(t *testing.T, lang, marker string) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(data), "```"+lang+"\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("docs/delivery.md has no %s block with %q", lang, marker)
	return ""
}

// captureSink is a plain HTTP sink that keeps the last request and answers 204.
func captureSink(t *testing.T) (*httptest.Server, *atomic.Pointer[captured]) {
	t.Helper()
	var last atomic.Pointer[captured]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		last.Store(&captured{header: r.Header.Clone(), body: body})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

// deliverSigned makes one real delivery of testMessage, signed with keyFiles in scheme, to a
// capturing sink and returns it as received.
func deliverSigned(t *testing.T, scheme sign.Scheme, keyFiles ...string) *captured {
	t.Helper()
	signer, err := sign.NewSigner(keyFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTTP(HTTPConfig{Signer: signer, SignScheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	srv, last := captureSink(t)
	if o := h.Deliver(t.Context(), testRule(srv.URL), testMessage()); o.Verdict != delivery.Delivered {
		t.Fatalf("delivery: %+v", o)
	}
	return last.Load()
}

// The verifiers docs/delivery.md shows are the ones tested: the Go block is
// verifySluiceSignature (which verifyingSink runs on real deliveries), word for word; the
// Python and Node blocks, run with python3 and node, accept a real delivery and refuse it
// under another message id, with another key, and 10 minutes old.
func TestDocumentedVerifiers(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("signed_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := string(src)[strings.Index(string(src), "func verifySluiceSignature"):]
	fn = fn[:strings.Index(fn, "\n}\n")+3]
	if got := docBlock(t, "go", "func verifySluiceSignature"); strings.TrimSpace(got) != strings.TrimSpace(fn) {
		t.Errorf("docs/delivery.md's Go verifier differs from verifySluiceSignature in signed_test.go:\n%s", got)
	}

	key := "doc-key-0123456789abcdef"
	keyFile := writeKey(t, t.TempDir(), "k", key)
	d := deliverSigned(t, sign.SchemeSluice, keyFile)
	header, id, body := d.header.Get("Sluice-Signature"), d.header.Get("Sluice-Message-Id"), d.body
	if id != testMessage().ID || d.header.Get("Idempotency-Key") != id {
		t.Fatalf("delivered Sluice-Message-Id %q, Idempotency-Key %q", id, d.header.Get("Idempotency-Key"))
	}
	keys := [][]byte{[]byte(key)}
	if !verifySluiceSignature(header, id, body, keys, time.Now()) {
		t.Fatalf("the Go verifier refuses a real delivery: %s", header)
	}
	if verifySluiceSignature(header, "0192f5e4-7c1a-7d2e-9a41-000000000000", body, keys, time.Now()) {
		t.Fatal("the Go verifier accepts the delivery under another message id")
	}
	stale := sign.Value(keys, id, time.Now().Add(-10*time.Minute).Unix(), body)
	bodyFile := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "true false false false" // good, another id, another key, stale
	args := []string{header, id, bodyFile, key, stale}

	t.Run("python", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("SKIPPED: no python3 to run docs/delivery.md's Python verifier")
		}
		script := docBlock(t, "python", "def verify_sluice_signature") + `
import sys
header, msg_id, body_file, key, stale = sys.argv[1:6]
body = open(body_file, "rb").read()
k = key.encode()
print(" ".join(str(r).lower() for r in [
    verify_sluice_signature(header, msg_id, body, [b"other-key-0123456789", k]),
    verify_sluice_signature(header, "0192f5e4-7c1a-7d2e-9a41-000000000000", body, [k]),
    verify_sluice_signature(header, msg_id, body, [b"other-key-0123456789"]),
    verify_sluice_signature(stale, msg_id, body, [k])]))
`
		out, err := exec.Command(py, append([]string{"-c", script}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("python3: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Fatalf("the Python verifier says %q, want %q (good, another id, another key, stale)", got, want)
		}
	})
	t.Run("node", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			t.Skip("SKIPPED: no node to run docs/delivery.md's Node verifier")
		}
		script := docBlock(t, "js", "function verifySluiceSignature") + `
const fs = require("node:fs");
const [header, msgId, bodyFile, key, stale] = process.argv.slice(1); // node -e: no script path in argv
const body = fs.readFileSync(bodyFile);
const k = Buffer.from(key);
console.log([
  verifySluiceSignature(header, msgId, body, [Buffer.from("other-key-0123456789"), k]),
  verifySluiceSignature(header, "0192f5e4-7c1a-7d2e-9a41-000000000000", body, [k]),
  verifySluiceSignature(header, msgId, body, [Buffer.from("other-key-0123456789")]),
  verifySluiceSignature(stale, msgId, body, [k]),
].join(" "));
`
		out, err := exec.Command(node, append([]string{"-e", script, "--"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Fatalf("the Node verifier says %q, want %q (good, another id, another key, stale)", got, want)
		}
	})
}

// The attack of issue #32, item 7: a delivery captured at the sink, sent again at once to
// another path with a new Sluice-Message-Id and Idempotency-Key (so the sink's dedupe does
// not know it). Its signature covered only the timestamp and the body, so the documented
// verifier accepted it; now it covers the id and the replay is refused. The same replay
// under the original id is accepted by the signature — the sink's dedupe on that signed id
// drops it (docs/delivery.md "Verifying a signature").
func TestReplayedDeliveryUnderAnotherIDRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := "replay-key-0123456789abcdef"
	d := deliverSigned(t, sign.SchemeSluice, writeKey(t, dir, "k", key))
	keys := [][]byte{[]byte(key)}
	var accepted, refused atomic.Int64
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("Sluice-Message-Id")
		if !verifySluiceSignature(r.Header.Get("Sluice-Signature"), id, body, keys, time.Now()) {
			refused.Add(1)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
		seen[id] = true
	}))
	defer srv.Close()
	replay := func(path, id string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(string(d.body)))
		req.Header = d.header.Clone()
		req.Header.Set("Sluice-Message-Id", id)
		req.Header.Set("Idempotency-Key", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := replay("/other/path", "0192f5e4-7c1a-7d2e-9a41-ffffffffffff"); code != http.StatusUnauthorized {
		t.Fatalf("a captured delivery replayed under a new id and Idempotency-Key: %d, want 401", code)
	}
	if code := replay("/other/path", d.header.Get("Sluice-Message-Id")); code != http.StatusNoContent || !seen[testMessage().ID] {
		t.Fatalf("the same delivery under its own id: %d (the signature holds; the sink's dedupe on the id drops it)", code)
	}
}

// With sign_scheme: standard-webhooks a delivery carries webhook-id (the message id),
// webhook-timestamp and webhook-signature instead of Sluice-Signature, and verifies as the
// Standard Webhooks specification says; -sign-scheme is the default a rule's sign_scheme
// overrides. A submission's own signature headers never reach the sink.
func TestStandardWebhooksDelivery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := "std-key-0123456789abcdef"
	keyFile := writeKey(t, dir, "k", key)
	signer, err := sign.NewSigner([]string{keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTTP(HTTPConfig{Signer: signer}) // -sign-scheme default: sluice
	if err != nil {
		t.Fatal(err)
	}
	srv, last := captureSink(t)
	m := testMessage()
	m.Headers = map[string]string{"Webhook-Signature": "v1,forged", "webhook-id": "forged", "X-Tenant": "t-1"}

	rule := testRule(srv.URL)
	rule.Sink.SignScheme = string(sign.SchemeStandard)
	if o := h.Deliver(t.Context(), rule, m); o.Verdict != delivery.Delivered {
		t.Fatalf("delivery: %+v", o)
	}
	d := last.Load()
	if d.header.Get("Sluice-Signature") != "" || d.header.Get("webhook-id") != m.ID || d.header.Get("X-Tenant") != "t-1" {
		t.Fatalf("standard-webhooks headers: %v", d.header)
	}
	if vs := d.header.Values("webhook-signature"); len(vs) != 1 || strings.Contains(vs[0], "forged") {
		t.Fatalf("webhook-signature %v: want sluice's only", vs)
	}
	if err := sign.VerifyStandard(d.header.Get("webhook-id"), d.header.Get("webhook-timestamp"), d.header.Get("webhook-signature"),
		d.body, [][]byte{[]byte(key)}, time.Now(), 5*time.Minute); err != nil {
		t.Fatalf("a standard-webhooks delivery does not verify: %v (%v)", err, d.header)
	}

	// The default scheme, and a submission's forged Standard Webhooks headers dropped.
	if o := h.Deliver(t.Context(), testRule(srv.URL), m); o.Verdict != delivery.Delivered {
		t.Fatalf("delivery: %+v", o)
	}
	d = last.Load()
	if d.header.Get("webhook-signature") != "" || d.header.Get("webhook-id") != "" {
		t.Fatalf("a submission's webhook-* headers reached the sink: %v", d.header)
	}
	if !verifySluiceSignature(d.header.Get("Sluice-Signature"), d.header.Get("Sluice-Message-Id"), d.body, [][]byte{[]byte(key)}, time.Now()) {
		t.Fatalf("the default scheme: %v", d.header)
	}
}
