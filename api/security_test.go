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
		v := sign.Value([]byte("k-0123456789abcdef"), time.Now().Unix(), []byte(`{}`))
		if !regexp.MustCompile(pattern).MatchString(v) {
			t.Fatalf("the signer's %q does not match the documented pattern %s", v, pattern)
		}
		return
	}
	t.Fatal("sink webhook: no Sluice-Signature header")
}
