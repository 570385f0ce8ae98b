package api_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/sign"
)

// The sink webhook documents Sluice-Signature (optional), and its pattern matches what the
// signer sends.
func TestSinkWebhookSignature(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, p := range get(doc, "webhooks", "sinkDelivery", "post", "parameters").([]any) {
		p := resolve(t, doc, p)
		if p["name"] != "Sluice-Signature" {
			continue
		}
		if p["in"] != "header" || p["required"] != false {
			t.Fatalf("Sluice-Signature: %v, want an optional header", p)
		}
		pattern := get(p, "schema", "pattern").(string)
		keys := [][]byte{[]byte("k-0123456789abcdef"), []byte("k2-0123456789abcdef")}
		for _, k := range [][][]byte{keys[:1], keys} { // one key, and two during a rotation
			v := sign.Value(k, "0192f5e4-7c1a-7d2e-9a41-1b2c3d4e5f60", time.Now().Unix(), []byte(`{}`))
			if !regexp.MustCompile(pattern).MatchString(v) {
				t.Fatalf("the signer's %q does not match the documented pattern %s", v, pattern)
			}
		}
		return
	}
	t.Fatal("sink webhook: no Sluice-Signature header")
}

// The Standard Webhooks signature the signer sends matches the webhook's documented pattern,
// with one key and with two.
func TestSinkWebhookStandardSignature(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, p := range get(doc, "webhooks", "sinkDelivery", "post", "parameters").([]any) {
		p := resolve(t, doc, p)
		if p["name"] != sign.HeaderWebhookSignature {
			continue
		}
		pattern := get(p, "schema", "pattern").(string)
		keys := [][]byte{[]byte("k-0123456789abcdef"), []byte("k2-0123456789abcdef")}
		for _, k := range [][][]byte{keys[:1], keys} {
			v := sign.StandardValue(k, "0192f5e4-7c1a-7d2e-9a41-1b2c3d4e5f60", time.Now().Unix(), []byte(`{}`))
			if !regexp.MustCompile(pattern).MatchString(v) {
				t.Fatalf("the signer's %q does not match the documented pattern %s", v, pattern)
			}
		}
		return
	}
	t.Fatal("sink webhook: no webhook-signature header")
}
