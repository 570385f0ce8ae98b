package ingress_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

const twoDomainRules = routesRules + `---
domain: marketing
descriptors:
  - key: campaign
    name: campaigns
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
`

// TestStatusNeedsATokenOfTheMessagesDomain: with -submit-tokens, GET /v1/messages/{id}
// answers a submit token of the message's domain (or of every domain) and admin tokens;
// no token or an unknown one is 401, another domain's token 403 — before any store is
// read, so the answer does not even say whether the message exists.
func TestStatusNeedsATokenOfTheMessagesDomain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	submit := filepath.Join(dir, "submit-tokens")
	os.WriteFile(submit, []byte("any submit "+submitAll+"\nmkt submit:marketing "+submitOther+"\nord submit:orders ord-secret-0123456789abc\n"), 0o600)
	admin := filepath.Join(dir, "admin-tokens")
	os.WriteFile(admin, []byte("viewer read "+viewerSecret+"\n"), 0o600)
	m := startRules(t, twoDomainRules, io.Discard, "-submit-tokens", submit, "-admin-tokens", admin)
	base := "http://" + m.Addr.String()
	a := call(t, "POST", base+"/v1/messages", submitAll, `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`)
	if a.status != 202 {
		t.Fatalf("submit: %d %v", a.status, a.body)
	}
	id := a.body["id"].(string)
	for _, c := range []struct {
		token string
		want  int
	}{
		{"", 401}, {"unknown-0123456789abcdef", 401},
		{submitOther, 403},
		{"ord-secret-0123456789abc", 200}, {submitAll, 200}, {viewerSecret, 200}, {routesToken, 200},
	} {
		a := call(t, "GET", base+"/v1/messages/"+id, c.token, "")
		if a.status != c.want {
			t.Errorf("status with %q: %d %v, want %d", c.token, a.status, a.body, c.want)
		}
		if c.want == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: %v", a.header)
		}
		if c.want == 403 && (a.body["key"] != nil || a.body["state"] != nil) {
			t.Errorf("403 shows the message: %v", a.body)
		}
	}
	// An id of another domain that does not exist: 403 too (not 404, which would say it
	// does not exist).
	forged := strings.Replace(id, id[:8], "01900000", 1)
	if a := call(t, "GET", base+"/v1/messages/"+forged, submitOther, ""); a.status != 403 {
		t.Errorf("forged id of orders with the marketing token: %d %v", a.status, a.body)
	}
}

// TestStatusAndDeadLettersNeverShowAURLsSecrets: a delivery error that quotes a sink URL —
// as one stored by an earlier version did — reaches neither GET /v1/messages/{id} nor the
// dead letters with the URL's password, user token or query string.
func TestStatusAndDeadLettersNeverShowAURLsSecrets(t *testing.T) {
	t.Parallel()
	m := startWith(t, io.Discard)
	base := "http://" + m.Addr.String()
	id, err := queue.NewID("orders", "m-9")
	if err != nil {
		t.Fatal(err)
	}
	reason := `8 attempts, last error: sink: Post "https://hookuser:hookpass@hooks.example/in?api_key=querysecret": dial tcp: refused`
	msg := queue.Message{ID: id, Rule: "orders", Key: "m-9", Payload: []byte(`{}`), CreatedAt: time.Now(), Attempt: 8, LastError: reason}
	if err := m.Stack.Dead.Dead(context.Background(), "orders", msg, reason); err != nil {
		t.Fatal(err)
	}
	st := call(t, "GET", base+"/v1/messages/"+id, "", "")
	dead := call(t, "GET", base+"/v1/admin/dead?queue=orders", routesToken, "")
	if st.status != 200 || dead.status != 200 {
		t.Fatalf("status %d %v, dead %d %v", st.status, st.body, dead.status, dead.body)
	}
	shown := toString(st.body) + toString(dead.body)
	for _, secret := range []string{"hookpass", "querysecret"} {
		if strings.Contains(shown, secret) {
			t.Errorf("shown: %q", secret)
		}
	}
	if !strings.Contains(shown, "https://hookuser:xxxxx@hooks.example/in?REDACTED") {
		t.Errorf("the redacted URL is not shown: %s", shown)
	}
	// What the lookup read is on /metrics (the queue of m-9 is empty: 0, but present).
	if !strings.Contains(scrapeText(t, base), "sluice_status_messages_read_total ") {
		t.Errorf("/metrics lacks sluice_status_messages_read_total")
	}
}
