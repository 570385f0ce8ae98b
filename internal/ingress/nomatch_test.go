package ingress_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMarketingExampleAsRead: the marketing request README.md shows, sent as written to
// an ingress running deploy/examples, is queued; the descriptor a new user tries first
// (user_id alone) is a 404 that names the shape the domain does have. An unknown domain
// names the domains there are.
func TestMarketingExampleAsRead(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-d '(\{"domain":"messaging"[^']*)'`).FindSubmatch(readme)
	if m == nil {
		t.Fatal(`README.md shows no request with -d '{"domain":"messaging"…}'`)
	}
	examples, _ := filepath.Abs("../../deploy/examples")
	e := launch(t, examples, nil, nil)
	for i := 0; i < 5; i++ {
		if r := e.do("POST", "/v1/messages", string(m[1])); r.code != 202 || r.body["state"] != "queued" {
			t.Fatalf("README's marketing request %d: %d %s", i+1, r.code, r.raw)
		}
	}
	if r := e.do("POST", "/v1/messages", string(m[1])); r.code != 202 || r.body["state"] != "parked" || r.body["retry_at"] == nil {
		t.Fatalf("the sixth: %d %s; want parked with retry_at, as README says", r.code, r.raw)
	}

	r := e.do("POST", "/v1/messages", `{"domain":"messaging","descriptor":[{"key":"user_id","value":"u-1"}],"payload":{}}`)
	want := `no rule of domain "messaging" matches this descriptor; domain "messaging" has: [message_type=marketing, user_id]`
	if r.code != 404 || r.body["detail"] != want || !strings.HasSuffix(r.body["type"].(string), "#no-matching-rule") {
		t.Errorf("user_id alone: %d %s\nwant detail %s", r.code, r.raw, want)
	}
	r = e.do("POST", "/v1/messages", `{"domain":"shipping","descriptor":[{"key":"user_id","value":"u-1"}],"payload":{}}`)
	want = `no rule of domain "shipping" matches this descriptor; there is no such domain; the domains are: "auth", "edge_proxy", "messaging", "orders"`
	if r.code != 404 || r.body["detail"] != want {
		t.Errorf("unknown domain: %d %s\nwant detail %s", r.code, r.raw, want)
	}
}
