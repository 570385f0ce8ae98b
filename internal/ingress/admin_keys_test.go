package ingress_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// PATCH of one key: the answer and GET show the effective outflow and its source, the
// process's index sees it within 1 s, the audit trail records it, and reset brings the
// rule's value back. A key with '.', '*' and a space is data, not subject syntax.
func TestAdminKeyOverridePatchAndGet(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	key := "m 42.*"
	path := "/v1/admin/queues/orders/keys/" + url.PathEscape(key)
	if g := e.admin("GET", path, ""); g.code != 200 || g.body["source"] != "rule" || g.body["outflow_per_second"] != float64(10) || g.body["override"] != nil {
		t.Fatalf("before: %d %s", g.code, g.raw)
	}
	p := e.admin("PATCH", path, `{"outflow":"20/s","for":"24h"}`)
	if p.code != 200 || p.body["outflow_per_second"] != float64(20) || !strings.HasPrefix(p.body["source"].(string), "key override until ") {
		t.Fatalf("patch: %d %s", p.code, p.raw)
	}
	if !waittest.Within(time.Second, func() bool { _, ok := e.main.Stack.Keys.Lookup("orders", key); return ok }) {
		t.Fatal("the index did not see the override within 1 s")
	}
	g := e.admin("GET", path, "")
	if g.body["source"] != p.body["source"] || g.body["outflow"].(map[string]any)["requests_per_unit"] != float64(20) {
		t.Fatalf("get: %s", g.raw)
	}
	if a := e.admin("GET", "/v1/admin/audit", ""); !strings.Contains(a.raw, `"key_tune"`) || !strings.Contains(a.raw, "m 42.*") {
		t.Errorf("audit: %s", a.raw)
	}
	for body, field := range map[string]string{
		`{"capacity":5}`:                   "capacity",
		`{"outflow":"0/s"}`:                "outflow",
		`{"for":"1h","until":"x"}`:         "until",
		`{"until":"2001-01-01T00:00:00Z"}`: "until",
	} {
		r := e.admin("PATCH", path, body)
		if r.code != 400 || (field != "" && r.body["field"] != field) {
			t.Errorf("%s: %d %s", body, r.code, r.raw)
		}
	}
	if r := e.admin("PATCH", "/v1/admin/queues/nope/keys/a", `{"paused":true}`); r.code != 404 {
		t.Errorf("unknown queue: %d", r.code)
	}
	r := e.admin("PATCH", path, `{"reset":true}`)
	if r.code != 200 || r.body["source"] != "rule" || r.body["outflow_per_second"] != float64(10) {
		t.Fatalf("reset: %d %s", r.code, r.raw)
	}
	if !waittest.Within(time.Second, func() bool { _, ok := e.main.Stack.Keys.Lookup("orders", key); return !ok }) {
		t.Fatal("reset not seen within 1 s")
	}
	// A read token may look but not write.
	if r := e.do("PATCH", path, `{"paused":true}`); r.code != 401 {
		t.Errorf("no token: %d", r.code)
	}
}

// The bulk form: 10,000 CSV lines are written and indexed; a file with bad lines is
// refused whole, naming each line and field; NDJSON works the same way.
func TestAdminKeyOverridesBulk(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	var b strings.Builder
	b.WriteString("key,outflow,for\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "m-%d,%d/s,24h\n", i, 1+i%9)
	}
	start := time.Now()
	r := e.do("POST", "/v1/admin/queues/orders/keys", b.String(), "Authorization", "Bearer "+e.token, "Content-Type", "text/csv")
	if r.code != 200 || r.body["set"] != float64(10000) || r.body["written"] != float64(10000) || r.body["lines"] != float64(10000) {
		t.Fatalf("bulk: %d %s", r.code, r.raw)
	}
	if !waittest.Within(10*time.Second, func() bool { return e.main.Stack.Keys.Len() == 10000 }) {
		t.Fatalf("index holds %d", e.main.Stack.Keys.Len())
	}
	t.Logf("10,000 keys by CSV: answered and indexed in %v", time.Since(start))
	if g := e.admin("GET", "/v1/admin/queues/orders/keys/m-4711", ""); g.body["outflow_per_second"] != float64(1+4711%9) {
		t.Errorf("m-4711: %s", g.raw)
	}

	bad := "m-1,5/s\nm-2,fast\nm-3,2/s,soon\nm-1,3/s\n"
	r = e.do("POST", "/v1/admin/queues/orders/keys", bad, "Authorization", "Bearer "+e.token, "Content-Type", "text/csv")
	errs, _ := r.body["errors"].([]any)
	if r.code != 400 || r.body["field"] != "line 2: outflow" || len(errs) != 3 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("bad CSV: %d %s", r.code, r.raw)
	}
	want := []struct {
		line  float64
		field string
	}{{2, "outflow"}, {3, "for"}, {4, "key"}}
	for i, w := range want {
		got := errs[i].(map[string]any)
		if got["line"] != w.line || got["field"] != w.field {
			t.Errorf("error %d = %v, want line %v field %s", i, got, w.line, w.field)
		}
	}
	if g := e.admin("GET", "/v1/admin/queues/orders/keys/m-1", ""); g.body["outflow_per_second"] != float64(2) {
		t.Errorf("a refused file wrote m-1: %s", g.raw)
	}

	nd := `{"key":"m-1","paused":true,"until":"2099-01-01T00:00:00Z"}` + "\n\n" + `{"key":"m-2","reset":true}` + "\n"
	r = e.do("POST", "/v1/admin/queues/orders/keys", nd, "Authorization", "Bearer "+e.token, "Content-Type", "application/x-ndjson")
	if r.code != 200 || r.body["set"] != float64(1) || r.body["reset"] != float64(1) {
		t.Fatalf("ndjson: %d %s", r.code, r.raw)
	}
	if !waittest.Within(time.Second, func() bool { return e.main.Stack.Keys.Len() == 9999 }) {
		t.Fatalf("after the NDJSON: %d", e.main.Stack.Keys.Len())
	}
	r = e.do("POST", "/v1/admin/queues/orders/keys", `{"key":"m-1","capacity":3}`, "Authorization", "Bearer "+e.token, "Content-Type", "application/x-ndjson")
	if r.code != 400 || r.body["field"] != "line 1: capacity" {
		t.Fatalf("ndjson capacity: %d %s", r.code, r.raw)
	}
	r = e.do("POST", "/v1/admin/queues/orders/keys", `{"key":"m-3","for":"1h"}`, "Authorization", "Bearer "+e.token, "Content-Type", "application/x-ndjson")
	if r.code != 400 || r.body["field"] != "line 1: outflow" {
		t.Fatalf("a line that sets nothing: %d %s", r.code, r.raw)
	}
	if a := e.admin("GET", "/v1/admin/audit", ""); !strings.Contains(a.raw, `"key_bulk"`) {
		t.Errorf("audit: %s", a.raw)
	}
}

// A rule removed from the rules file takes its key overrides with it (other rules keep
// theirs); when it comes back it starts clean.
func TestAdminKeyOverridesRemovedWithTheirRule(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-rules-poll", "50ms")
	for _, p := range []string{"/v1/admin/queues/orders/keys/m-1", "/v1/admin/queues/parking/keys/p-1"} {
		if r := e.admin("PATCH", p, `{"outflow":"1/s"}`); r.code != 200 {
			t.Fatalf("%s: %d %s", p, r.code, r.raw)
		}
	}
	keys := e.main.Stack.Keys
	if !waittest.Within(time.Second, func() bool { return keys.Len() == 2 }) {
		t.Fatalf("index holds %d", keys.Len())
	}
	waittest.NextMillisecond() // the overrides' UpdatedAt (ms) precedes the removal
	without := testRules[strings.Index(testRules, "---")+4:]
	if err := os.WriteFile(path, []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	if !waittest.Within(10*time.Second, func() bool { _, ok := keys.Lookup("orders", "m-1"); return !ok }) {
		t.Fatal("the removed rule's key override is still there")
	}
	if _, ok := keys.Lookup("parking", "p-1"); !ok {
		t.Fatal("another rule's key override went too")
	}
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	var g reply
	if !waittest.Within(10*time.Second, func() bool { g = e.admin("GET", "/v1/admin/queues/orders/keys/m-1", ""); return g.code == 200 }) {
		t.Fatalf("orders not back: %d %s", g.code, g.raw)
	}
	if g.body["source"] != "rule" || g.body["override"] != nil {
		t.Fatalf("re-added rule: %s", g.raw)
	}
}

// Two ingress processes on one NATS and Redis: a key override written through one is in
// the other's index within 1 s; a process started afterwards (a restart) has it at once.
func TestAdminKeyOverrideTwoProcessesAndRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	procs := make([]*ingress.Main, 3)
	run := func(i int) {
		cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
			"-admin-token", "s3cret-0123456789", "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		m := &ingress.Main{Config: cfg, Logger: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Run(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		procs[i] = m
	}
	run(0)
	run(1)
	e := &env{t: t, base: "http://" + procs[0].Addr.String(), nats: n, main: procs[0], token: "s3cret-0123456789"}
	start := time.Now()
	if p := e.admin("PATCH", "/v1/admin/queues/orders/keys/m-42", `{"paused":true,"for":"1h"}`); p.code != 200 || p.body["paused"] != true {
		t.Fatalf("patch: %d %s", p.code, p.raw)
	}
	if !waittest.Within(time.Second, func() bool { o, ok := procs[1].Stack.Keys.Lookup("orders", "m-42"); return ok && o.Paused }) {
		t.Fatal("the other process did not see the override within 1 s")
	}
	t.Logf("seen by the other process after %v", time.Since(start))
	procs[0].Close()
	procs[1].Close()
	run(2)
	if o, ok := procs[2].Stack.Keys.Lookup("orders", "m-42"); !ok || !o.Paused || o.Until.IsZero() {
		t.Fatalf("after a restart: %v %v", o, ok)
	}
}
