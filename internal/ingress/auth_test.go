package ingress_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/waittest"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type authAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

func call(t *testing.T, method, url, token, body string) authAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := authAnswer{status: resp.StatusCode, header: resp.Header}
	json.Unmarshal(raw, &a.body)
	return a
}

const (
	viewerSecret  = "viewer-secret-0123456789"
	opsSecret     = "ops-secret-0123456789abc"
	viewer2Secret = "viewer2-secret-0123456789"
	submitAll     = "submit-any-0123456789abcd"
	submitOther   = "submit-other-0123456789ab"
)

// Scoped admin tokens: 401 (with WWW-Authenticate: Bearer) for a missing or unknown
// token, 403 for a read token on a change, 200 for the right scope; the token file is
// re-read when it changes; no secret ever reaches the log; whoami names the token.
func TestAdminTokenScopes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(tokens, []byte("# name scope token\nviewer read "+viewerSecret+"\nops operate "+opsSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	m := startWith(t, logs, "-admin-tokens", tokens)
	base := "http://" + m.Addr.String()

	for _, tok := range []string{"", "wrong-token-0123456789", viewerSecret + "x"} {
		a := call(t, "GET", base+"/v1/admin/queues", tok, "")
		if a.status != 401 || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") ||
			a.header.Get("Content-Type") != "application/problem+json" || a.body["type"] != "https://sluice.dev/problems#unauthorized" {
			t.Errorf("token %q: %d %v %v, want 401 problem with WWW-Authenticate: Bearer", tok, a.status, a.header, a.body)
		}
		if invalid := strings.Contains(a.header.Get("WWW-Authenticate"), `error="invalid_token"`); invalid != (tok != "") {
			t.Errorf("token %q: WWW-Authenticate %q", tok, a.header.Get("WWW-Authenticate"))
		}
	}
	// -admin-token still works, as operate.
	if a := call(t, "GET", base+"/v1/admin/whoami", routesToken, ""); a.status != 200 || a.body["name"] != "admin-token" || a.body["scope"] != "operate" {
		t.Errorf("whoami with -admin-token: %d %v", a.status, a.body)
	}
	if a := call(t, "GET", base+"/v1/admin/whoami", viewerSecret, ""); a.status != 200 || a.body["name"] != "viewer" || a.body["scope"] != "read" {
		t.Errorf("whoami with the read token: %d %v", a.status, a.body)
	}
	if a := call(t, "GET", base+"/v1/admin/queues/orders", viewerSecret, ""); a.status != 200 {
		t.Errorf("GET with the read token: %d %v", a.status, a.body)
	}
	for _, op := range []struct{ method, path, body string }{
		{"PATCH", "/v1/admin/queues/orders", `{"paused":true}`},
		{"POST", "/v1/admin/queues/orders/purge", ""},
		{"DELETE", "/v1/admin/queues/orders/keys/m-1", ""},
		{"POST", "/v1/admin/dead/replay?queue=orders", ""},
	} {
		a := call(t, op.method, base+op.path, viewerSecret, op.body)
		if a.status != 403 || a.body["type"] != "https://sluice.dev/problems#forbidden" || a.header.Get("WWW-Authenticate") != "" {
			t.Errorf("%s %s with the read token: %d %v, want 403 #forbidden", op.method, op.path, a.status, a.body)
		}
	}
	if a := call(t, "GET", base+"/v1/admin/queues/orders", viewerSecret, ""); a.status != 200 || a.body["paused"] != false {
		t.Errorf("after the refused PATCH the queue is %v, want unchanged", a.body)
	}
	if a := call(t, "PATCH", base+"/v1/admin/queues/orders", opsSecret, `{"paused":true}`); a.status != 200 || a.body["paused"] != true {
		t.Errorf("PATCH with the operate token: %d %v", a.status, a.body)
	}

	// Rotation: the file is rewritten; the removed token stops working, the new one works,
	// without a restart.
	if err := os.WriteFile(tokens+".new", []byte("viewer2 read "+viewer2Secret+"\nops operate "+opsSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Rename(tokens+".new", tokens)
	var old, nw authAnswer
	if !waittest.Within(5*time.Second, func() bool {
		old = call(t, "GET", base+"/v1/admin/queues", viewerSecret, "")
		nw = call(t, "GET", base+"/v1/admin/queues", viewer2Secret, "")
		return old.status == 401 && nw.status == 200
	}) {
		t.Fatalf("5s after rewriting the token file: old token %d, new token %d", old.status, nw.status)
	}
	// A broken file fails closed: the bad line's token is refused, the good line's works
	// (TestRevokedTokensStopWorkingWhateverElseTheFileHolds covers every way to break it).
	os.WriteFile(tokens, []byte("viewer2 root "+viewer2Secret+"\nops operate "+opsSecret+"\n"), 0o600)
	// The file is re-read at most once a second: call until the ingress has tried (and
	// logged that the file is broken).
	waittest.Eventually(t, 5*time.Second, "the bad token file logged as broken", func() bool {
		return strings.Contains(logs.String(), "token file broken")
	})
	if a := call(t, "GET", base+"/v1/admin/queues", viewer2Secret, ""); a.status != 401 {
		t.Errorf("the bad line's token: %d, want 401", a.status)
	}
	if a := call(t, "GET", base+"/v1/admin/queues", opsSecret, ""); a.status != 200 {
		t.Errorf("the good line's token: %d, want 200", a.status)
	}
	out := logs.String()
	for _, secret := range []string{viewerSecret, opsSecret, viewer2Secret, routesToken} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds the secret %q", secret)
		}
	}
}

// -submit-tokens: submitting needs a submit token, a domain token submits to its domain
// only; the admin tokens do not submit.
func TestSubmitTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "submit-tokens")
	os.WriteFile(file, []byte("any submit "+submitAll+"\nother submit:marketing "+submitOther+"\n"), 0o600)
	m := startWith(t, io.Discard, "-submit-tokens", file)
	base := "http://" + m.Addr.String()
	body := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`
	for _, tok := range []string{"", routesToken, "unknown-0123456789abcdef"} {
		if a := call(t, "POST", base+"/v1/messages", tok, body); a.status != 401 || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("submit with %q: %d %v, want 401", tok, a.status, a.body)
		}
	}
	if a := call(t, "POST", base+"/v1/messages", submitOther, body); a.status != 403 || a.body["type"] != "https://sluice.dev/problems#forbidden" {
		t.Errorf("submit to orders with a marketing token: %d %v, want 403", a.status, a.body)
	}
	a := call(t, "POST", base+"/v1/messages", submitAll, body)
	if a.status != 202 {
		t.Fatalf("submit with the submit token: %d %v", a.status, a.body)
	}
	id, _ := a.body["id"].(string)
	if a := call(t, "DELETE", base+"/v1/messages/"+id, submitOther, ""); a.status != 403 {
		t.Errorf("cancel of an orders message with a marketing token: %d %v, want 403", a.status, a.body)
	}
	if a := call(t, "DELETE", base+"/v1/messages/"+id, "", ""); a.status != 401 {
		t.Errorf("cancel without a token: %d, want 401", a.status)
	}
	if a := call(t, "DELETE", base+"/v1/messages/"+id, submitAll, ""); a.status != 200 && a.status != 409 {
		t.Errorf("cancel with the submit token: %d %v", a.status, a.body)
	}
	// Checks need a check token now (TestCheckTokens); a submit token does not check.
	check := `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`
	if a := call(t, "POST", base+"/v1/check", "", check); a.status != 401 {
		t.Errorf("check without a token: %d, want 401", a.status)
	}
	if a := call(t, "POST", base+"/v1/check", submitAll, check); a.status != 403 {
		t.Errorf("check with a submit token: %d, want 403", a.status)
	}
}

// Every operator change lands in the audit trail with who, what, before and after, newest
// first, paged; and as a log line.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "admin-tokens")
	os.WriteFile(tokens, []byte("alice operate "+opsSecret+"\nviewer read "+viewerSecret+"\n"), 0o600)
	logs := &syncBuffer{}
	m := startWith(t, logs, "-admin-tokens", tokens)
	base := "http://" + m.Addr.String()
	steps := []struct{ method, path, body, token string }{
		{"PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"second","requests_per_unit":2}}`, opsSecret},
		{"PATCH", "/v1/admin/queues/orders", `{"paused":true}`, routesToken},
		{"PATCH", "/v1/admin/queues/orders", `{"paused":false}`, opsSecret},
		{"PATCH", "/v1/admin/queues/orders", `{"reset":true}`, opsSecret},
		{"DELETE", "/v1/admin/queues/orders/keys/m-1", "", opsSecret},
		{"POST", "/v1/admin/queues/orders/purge", "", opsSecret},
		{"POST", "/v1/admin/dead/replay?queue=orders", "", opsSecret},
		{"PATCH", "/v1/admin/queues/orders", `{"paused":true}`, viewerSecret}, // refused: not a change
	}
	for _, s := range steps {
		call(t, s.method, base+s.path, s.token, s.body)
	}
	a := call(t, "GET", base+"/v1/admin/audit", viewerSecret, "")
	if a.status != 200 {
		t.Fatalf("GET /v1/admin/audit: %d %v", a.status, a.body)
	}
	recs, _ := a.body["records"].([]any)
	want := []struct{ action, actor string }{
		{"refused", "viewer"}, // the read token's PATCH, 403
		{"replay_all", "alice"}, {"purge", "alice"}, {"key_delete", "alice"}, {"reset", "alice"},
		{"resume", "alice"}, {"pause", "admin-token"}, {"tune", "alice"},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	var lastSeq float64 = 1 << 62
	for i, w := range want {
		r := recs[i].(map[string]any)
		if w.action == "refused" {
			if r["actor"] != w.actor || r["result"] != "403 Forbidden" || r["target"] != "PATCH /v1/admin/queues/orders" {
				t.Errorf("record %d: %v, want the refused PATCH", i, r)
			}
		} else if r["action"] != w.action || r["actor"] != w.actor || r["queue"] != "orders" || r["result"] != "ok" {
			t.Errorf("record %d: %v, want %s by %s", i, r, w.action, w.actor)
		}
		if seq := r["seq"].(float64); seq >= lastSeq {
			t.Errorf("record %d: seq %v not newest first", i, seq)
		} else {
			lastSeq = seq
		}
		if _, err := time.Parse(time.RFC3339, r["at"].(string)); err != nil {
			t.Errorf("record %d: at %v", i, r["at"])
		}
	}
	tune := recs[len(recs)-1].(map[string]any)
	after, _ := tune["after"].(map[string]any)
	if outflow, _ := after["outflow"].(map[string]any); outflow["requests_per_unit"] != float64(2) {
		t.Errorf("tune record after = %v, want the new outflow", tune["after"])
	}
	if del := recs[3].(map[string]any); del["target"] != "m-1" {
		t.Errorf("key_delete target = %v", del["target"])
	}
	// Paging: two per page, following next, gives the same records.
	var paged []any
	next := "/v1/admin/audit?limit=2"
	for next != "" && len(paged) < 20 {
		p := call(t, "GET", base+next, viewerSecret, "")
		if p.status != 200 {
			t.Fatalf("GET %s: %d", next, p.status)
		}
		page, _ := p.body["records"].([]any)
		paged = append(paged, page...)
		next, _ = p.body["next"].(string)
	}
	if len(paged) != len(recs) {
		t.Fatalf("paging by 2 gave %d records, want %d", len(paged), len(recs))
	}
	for i := range paged {
		if paged[i].(map[string]any)["seq"] != recs[i].(map[string]any)["seq"] {
			t.Errorf("page record %d differs", i)
		}
	}
	if a := call(t, "GET", base+"/v1/admin/audit?before=x", viewerSecret, ""); a.status != 400 || a.body["field"] != "before" {
		t.Errorf("bad cursor: %d %v", a.status, a.body)
	}
	// The log line of each change.
	if n := strings.Count(logs.String(), `"msg":"audit: `); n < len(want) {
		t.Errorf("%d audit log lines, want %d", n, len(want))
	}
}

// ServerConfig.AdminToken alone (no Auth) is one operate token, as before scoped tokens.
func TestServerConfigAdminTokenShorthand(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(ingress.NewServer(ingress.ServerConfig{AdminToken: "shorthand-token-0123"}))
	defer srv.Close()
	if a := call(t, "GET", srv.URL+"/v1/admin/queues", "", ""); a.status != 401 {
		t.Fatalf("without the token: %d", a.status)
	}
	// This server has no admin handler: a known token reaches its 404.
	if a := call(t, "GET", srv.URL+"/v1/admin/queues", "shorthand-token-0123", ""); a.status != 404 {
		t.Fatalf("with the token: %d %v", a.status, a.body)
	}
}
