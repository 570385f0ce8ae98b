package rules

import (
	"fmt"
	"strings"
	"testing"
)

// TestNoMatchDetail: a descriptor that matches no rule is told the shapes its domain
// does have — the marketing example's nested path first of all — or the domains there
// are, and the message stays bounded however many rules there are.
func TestNoMatchDetail(t *testing.T) {
	t.Parallel()
	set, err := Load("../../deploy/examples")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"messaging": `no rule of domain "messaging" matches this descriptor; domain "messaging" has: [message_type=marketing, user_id]`,
		"orders":    `no rule of domain "orders" matches this descriptor; domain "orders" has: [merchant_id]`,
		"edge_proxy": `no rule of domain "edge_proxy" matches this descriptor; domain "edge_proxy" has: [remote_address], ` +
			`[remote_address=10.0.0.1], [remote_address=10.0.0.66], [authenticated=false, path=/api/*], [authenticated=false, path=/login], ` +
			`[client_id=scraper*, banned=true], [source_cluster=proxy, destination_cluster=override], [source_cluster=proxy, destination_cluster]`,
		"shipping": `no rule of domain "shipping" matches this descriptor; there is no such domain; the domains are: "auth", "edge_proxy", "messaging", "orders"`,
	}
	for domain, want := range cases {
		if got := set.NoMatchDetail(domain); got != want {
			t.Errorf("%s:\n got %s\nwant %s", domain, got, want)
		}
	}
	if got := (*Set)(nil).NoMatchDetail("x"); got != `no rule of domain "x" matches this descriptor; no rules are loaded` {
		t.Errorf("nil set: %s", got)
	}

	// Values that would read ambiguously are quoted.
	odd := mustParse(t, "domain: d\ndescriptors:\n  - key: a b\n    value: \"x, y=[z]\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if got, want := odd.Shapes("d"), []string{`["a b"="x, y=[z]"]`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("quoted shape %q, want %q", got, want)
	}

	// 500 rules in one domain, one with a long value: 8 shapes at most, bounded bytes.
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	b.WriteString("  - key: k\n    name: long\n    value: " + strings.Repeat("v", 1000) + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "  - key: key%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
	}
	big := mustParse(t, b.String()).NoMatchDetail("big")
	if len(big) > 600 || !strings.HasSuffix(big, " … and 500 more") || !strings.Contains(big, "has: [k=vvvv") {
		t.Errorf("%d bytes: %s", len(big), big)
	}
	if got := mustParse(t, b.String()).NoMatchDetail(strings.Repeat("x", 256)); len(got) > 200 {
		t.Errorf("a long unknown domain: %d bytes: %s", len(got), got)
	}
}
