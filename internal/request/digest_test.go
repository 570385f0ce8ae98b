package request

import (
	"strings"
	"testing"
)

// TestDigestIsStable: a claim's request digest is compared by every ingress that sees a
// repeat of its idempotency key, rolling upgrades included, so the bytes it hashes never
// change. The values were computed by v0.4's digest.
func TestDigestIsStable(t *testing.T) {
	entries := []Entry{{Key: "merchant_id", Value: "m-1"}, {Key: "user", Value: "ü 7"}}
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"compact", `{"order":"x","n":[1,2]}`, "BEy4h6nS5x5sWsyUTFd6RA"},
		{"whitespace", "{ \"order\" : \"x\",\n\t\"n\": [1, 2] }", "BEy4h6nS5x5sWsyUTFd6RA"}, // the same as compact
		{"space in a string", `{"order":"x y"}`, "blOzt2WzzPBNn6zCWJGrzg"},
		{"not JSON", "{ not json", "hdxJxFBFeosIMDcQf6Bcag"},
		{"long", `{"p":"` + strings.Repeat("x", 2000) + `"}`, "IMtYA0pTH6xtOAraL5UiaQ"},
	} {
		req := Submit{Domain: "orders", Descriptor: entries, Payload: []byte(tc.payload), IdempotencyKey: "k"}
		if got := req.Digest(); got != tc.want {
			t.Errorf("%s: digest %q, want %q", tc.name, got, tc.want)
		}
	}
	if d := (&Submit{Domain: "orders", Payload: []byte(`{}`)}).Digest(); d != "" {
		t.Errorf("digest without an idempotency key: %q, want none", d)
	}
}
