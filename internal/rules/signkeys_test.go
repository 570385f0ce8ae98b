package rules_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/rules"
)

// sink.sign_keys: a list of key files for an HTTP sink's signatures; anything else is
// refused naming the field.
func TestSinkSignKeys(t *testing.T) {
	t.Parallel()
	const ok = `domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "https://sink.example/hook", sign_keys: [/etc/sluice/sign/new, /etc/sluice/sign/old]}
`
	set, err := rules.Parse("orders.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Rule("orders").Sink.SignKeyFiles(); !slices.Equal(got, []string{"/etc/sluice/sign/new", "/etc/sluice/sign/old"}) {
		t.Fatalf("SignKeys = %v", got)
	}
	for _, c := range []struct{ sink, want string }{
		{`{url: "https://s.example", sign_keys: /etc/key}`, "sink.sign_keys: must be a list"},
		{`{url: "https://s.example", sign_keys: []}`, "sink.sign_keys: must be a list"},
		{`{url: "https://s.example", sign_keys: [""]}`, "sink.sign_keys[0]: must be a file path"},
		{`{url: "https://s.example", sign_keys: ["a,b"]}`, "sink.sign_keys[0]: must be a file path"},
		{`{nats_subject: orders.out, sign_keys: [/etc/key]}`, "sink.sign_keys: signs HTTP deliveries only"},
		{`{url: "https://s.example", sign_scheme: stripe}`, "sink.sign_scheme: must be sluice or standard-webhooks"},
		{`{nats_subject: orders.out, sign_scheme: sluice}`, "sink.sign_scheme: lays out the signature of HTTP deliveries"},
	} {
		doc := strings.Replace(ok, `{url: "https://sink.example/hook", sign_keys: [/etc/sluice/sign/new, /etc/sluice/sign/old]}`, c.sink, 1)
		_, err := rules.Parse("orders.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sink %s: %v, want an error with %q", c.sink, err, c.want)
		}
	}
}

// sink.sign_scheme: sluice or standard-webhooks, kept as given; absent is "" (the drainer's
// -sign-scheme).
func TestSinkSignScheme(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"sluice", "standard-webhooks", ""} {
		field := ""
		if scheme != "" {
			field = ", sign_scheme: " + scheme
		}
		doc := `domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "https://sink.example/hook"` + field + `}
`
		set, err := rules.Parse("orders.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if got := set.Rule("orders").Sink.SignScheme; got != scheme {
			t.Errorf("sign_scheme %q parsed as %q", scheme, got)
		}
	}
}
