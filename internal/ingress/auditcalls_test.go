package ingress_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/audit"
)

// TestRefusedAndFailedCallsAndCancelsAreAudited: besides the changes, the trail keeps
// admin calls refused (401, 403: at most 10 a second, the rest counted) or failed, and
// every cancel with its token and result; the records form one verifiable chain, and never
// hold a secret.
func TestRefusedAndFailedCallsAndCancelsAreAudited(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	admins := filepath.Join(dir, "admin-tokens")
	os.WriteFile(admins, []byte("viewer read "+viewerSecret+"\nalice operate "+opsSecret+"\n"), 0o600)
	submits := filepath.Join(dir, "submit-tokens")
	os.WriteFile(submits, []byte("shop submit:orders "+submitAll+"\nmkt submit:marketing "+submitOther+"\n"), 0o600)
	m := startRules(t, twoDomainRules, io.Discard, "-admin-tokens", admins, "-submit-tokens", submits)
	base := "http://" + m.Addr.String()

	call(t, "GET", base+"/v1/admin/queues", "", "")                              // refused: no token
	call(t, "GET", base+"/v1/admin/queues", "not-a-token-0123456789", "")        // refused: unknown token
	call(t, "POST", base+"/v1/admin/queues/orders/purge", viewerSecret, "")      // refused: read scope
	call(t, "PATCH", base+"/v1/admin/queues/nope", opsSecret, `{"paused":true}`) // failed: no such queue
	call(t, "GET", base+"/v1/admin/queues/nope", opsSecret, "")                  // a failed read: not recorded
	a := call(t, "POST", base+"/v1/messages", submitAll, `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{}}`)
	id, _ := a.body["id"].(string)
	call(t, "DELETE", base+"/v1/messages/"+id, submitOther, "") // cancel refused: another domain
	call(t, "DELETE", base+"/v1/messages/"+id, submitAll, "")   // cancelled

	recs := call(t, "GET", base+"/v1/admin/audit", viewerSecret, "").body["records"].([]any)
	type rec struct{ action, actor, target, result string }
	var got []rec
	for i := len(recs) - 1; i >= 0; i-- { // oldest first
		r := recs[i].(map[string]any)
		target, _ := r["target"].(string)
		actor, _ := r["actor"].(string)
		got = append(got, rec{r["action"].(string), actor, target, r["result"].(string)})
	}
	want := []rec{
		{"refused", "", "GET /v1/admin/queues", "401 Unauthorized"},
		{"refused", "(unknown token)", "GET /v1/admin/queues", "401 Unauthorized"},
		{"refused", "viewer", "POST /v1/admin/queues/orders/purge", "403 Forbidden"},
		{"failed", "alice", "PATCH /v1/admin/queues/nope", "404 Not Found"},
		{"cancel", "mkt", id, "403 Forbidden"},
		{"cancel", "shop", id, "ok"},
	}
	if len(got) != len(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	v, err := audit.New(m.Stack.JS, audit.Config{}).Verify(context.Background())
	if err != nil || v.Records != len(want) || len(v.Breaks) != 0 {
		t.Fatalf("verify: %+v %v, want %d records in one chain", v, err, len(want))
	}

	// A flood of bad tokens: at most 10 refusals a second reach the trail.
	for range 40 {
		call(t, "GET", base+"/v1/admin/queues", "flood-0123456789abcdef", "")
	}
	v, _ = audit.New(m.Stack.JS, audit.Config{}).Verify(context.Background())
	if flood := v.Records - len(want); flood > 20 { // the 40 calls may straddle a second
		t.Errorf("%d refusals of a flood of 40 recorded, want at most 10 a second", flood)
	}
	if metrics := scrapeText(t, base); !strings.Contains(metrics, "sluice_audit_refusals_suppressed_total") ||
		strings.Contains(metrics, "sluice_audit_refusals_suppressed_total 0\n") {
		t.Errorf("the suppressed refusals are not counted")
	}
	out := call(t, "GET", base+"/v1/admin/audit?limit=1000", viewerSecret, "")
	for _, secret := range []string{viewerSecret, opsSecret, submitAll, submitOther, "not-a-token", "flood-0123"} {
		if strings.Contains(strings.Join(strings.Fields(toString(out.body)), " "), secret) {
			t.Errorf("the trail holds the secret %q", secret)
		}
	}
}

func toString(v any) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				b.WriteString(k + " ")
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			b.WriteString(x + " ")
		}
	}
	walk(v)
	return b.String()
}
