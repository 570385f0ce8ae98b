package ingress_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// The routes the server registers and the operations api/openapi.yaml documents agree:
// every documented operation reaches a real handler (not the catch-all 404 of server.go or
// internal/admin/admin.go) and answers a status the document lists for it, and every route the server
// registers is documented. On a disagreement the document is the one to fix, unless the
// server is wrong.

// serverRoutes are the patterns registered in server.go (NewServer) and internal/admin/admin.go
// (Admin.ServeHTTP), less the catch-alls ("/" and the "/v1/admin/" prefix).
// TestServerRoutesListed keeps this list in step with the source.
var serverRoutes = []string{
	"POST /v1/messages",
	"GET /v1/messages/{id}",
	"DELETE /v1/messages/{id}",
	"POST /v1/check",
	"POST /json",
	"GET /healthz",
	"GET /readyz",
	"GET /metrics",
	"GET /ui/",
	"GET /openapi.yaml",
	"GET /v1/admin/rules",
	"GET /v1/admin/queues",
	"GET /v1/admin/queues/{name}",
	"PATCH /v1/admin/queues/{name}",
	"POST /v1/admin/queues/{name}/purge",
	"GET /v1/admin/queues/{name}/keys",
	"GET /v1/admin/queues/{name}/keys/{key}",
	"PATCH /v1/admin/queues/{name}/keys/{key}",
	"POST /v1/admin/queues/{name}/keys",
	"DELETE /v1/admin/queues/{name}/keys/{key}",
	"GET /v1/admin/dead",
	"POST /v1/admin/dead/{id}/replay",
	"POST /v1/admin/dead/replay",
	"GET /v1/admin/whoami",
	"GET /v1/admin/audit",
}

const routesToken = "routes-token-0123"

const routesRules = `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: auth
descriptors:
  - key: auth_type
    value: login
    name: login
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// routeProbe is what to send to one operation so that its handler, not a catch-all,
// answers: path parameters and a body. Operations without an entry get placeholders.
var routeProbes = map[string]struct {
	params map[string]string
	body   string
}{
	"submitMessage": {body: `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`},
	"check":         {body: `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`},
	"tuneQueue":     {body: `{"paused":false}`},
}

// Placeholders for path parameters: a real queue, a key that needs escaping, an unknown id.
var routeParams = map[string]string{
	"name": "orders",
	"key":  "m-1/🙂 x",
	"id":   "0193a1b2-0000-7000-8000-000000000000",
}

func startForRoutes(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(routesRules), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-admin-token", routesToken, "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return "http://" + m.Addr.String()
}

// documentedStatuses returns the response keys of every operation by operationId.
func documentedStatuses(t *testing.T) map[string][]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string               `yaml:"operationId"`
			Responses   map[string]yaml.Node `yaml:"responses"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, item := range doc.Paths {
		for _, op := range item {
			for code := range op.Responses {
				out[op.OperationID] = append(out[op.OperationID], code)
			}
		}
	}
	return out
}

// statusDocumented reports whether code is one of the documented response keys.
func statusDocumented(code int, keys []string) bool {
	c := strconv.Itoa(code)
	return slices.Contains(keys, c) || slices.Contains(keys, c[:1]+"XX") || slices.Contains(keys, "default")
}

// fillPath replaces every {param} of an OpenAPI path template with its percent-encoded value.
func fillPath(t *testing.T, tmpl string, params map[string]string) string {
	t.Helper()
	var b strings.Builder
	for rest := tmpl; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			b.WriteString(rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			t.Fatalf("path %s: unclosed {", tmpl)
		}
		name := rest[i+1 : i+j]
		v, ok := params[name]
		if !ok {
			v, ok = routeParams[name]
		}
		if !ok {
			v = "placeholder"
		}
		b.WriteString(rest[:i])
		b.WriteString(url.PathEscape(v))
		rest = rest[i+j+1:]
	}
	return b.String()
}

type routeAnswer struct {
	status int
	detail string
}

func probeRoute(t *testing.T, base, method, path, body, token string) routeAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
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
	var p struct {
		Detail string `json:"detail"`
	}
	json.Unmarshal(raw, &p)
	return routeAnswer{status: resp.StatusCode, detail: p.Detail}
}

func (a routeAnswer) catchAll() bool {
	return a.status == http.StatusNotFound &&
		(strings.HasPrefix(a.detail, "no such endpoint") || strings.HasPrefix(a.detail, "no such admin endpoint"))
}

// Every documented operation is served by a real handler and answers a documented status.
func TestRoutesDocumentedAreServed(t *testing.T) {
	t.Parallel()
	base := startForRoutes(t)
	statuses := documentedStatuses(t)
	routes := api.Routes()
	if len(routes) == 0 {
		t.Fatal("api.Routes() is empty")
	}
	for _, r := range routes {
		probe := routeProbes[r.OperationID]
		path := fillPath(t, r.Path, probe.params)
		token := ""
		if r.Admin {
			// Without the token: 401, before any routing.
			if a := probeRoute(t, base, r.Method, path, probe.body, ""); a.status != http.StatusUnauthorized {
				t.Errorf("%s (%s) without the admin token: %d %q, want 401", r.Pattern(), path, a.status, a.detail)
			}
			token = routesToken
		}
		a := probeRoute(t, base, r.Method, path, probe.body, token)
		switch {
		case a.catchAll():
			t.Errorf("%s (%s %s): not served — the catch-all answered %q", r.Pattern(), r.Method, path, a.detail)
		case a.status == http.StatusMethodNotAllowed:
			t.Errorf("%s (%s %s): 405, the server has the path but not the method", r.Pattern(), r.Method, path)
		case !statusDocumented(a.status, statuses[r.OperationID]):
			t.Errorf("%s (%s %s): answered %d %q, which openapi.yaml does not list for %s (it lists %v)",
				r.Pattern(), r.Method, path, a.status, a.detail, r.OperationID, statuses[r.OperationID])
		default:
			t.Logf("%-45s %d %s", r.Pattern(), a.status, a.detail)
		}
	}
	// An unknown queue or message reaches the handler too, which answers a documented 404.
	for _, r := range routes {
		if !strings.Contains(r.Path, "{name}") && !strings.Contains(r.Path, "{id}") {
			continue
		}
		probe := routeProbes[r.OperationID]
		path := fillPath(t, r.Path, map[string]string{"name": "no-such-queue", "id": "0193a1b2-0000-7000-8000-00000000dead"})
		token := ""
		if r.Admin {
			token = routesToken
		}
		a := probeRoute(t, base, r.Method, path, probe.body, token)
		if a.catchAll() || a.status != http.StatusNotFound || !statusDocumented(a.status, statuses[r.OperationID]) {
			t.Errorf("%s (%s %s): %d %q, want a documented 404 from its handler", r.Pattern(), r.Method, path, a.status, a.detail)
		}
	}
	// The catch-alls are what the probes above tell apart from a handler.
	for _, p := range []struct{ method, path, token string }{
		{"GET", "/v1/no-such-thing", ""},
		{"DELETE", "/v1/messages", ""},
		{"GET", "/v1/admin/no-such-thing", routesToken},
		{"PUT", "/v1/admin/queues/orders", routesToken},
	} {
		if a := probeRoute(t, base, p.method, p.path, "", p.token); !a.catchAll() {
			t.Errorf("%s %s: %d %q, want the catch-all 404", p.method, p.path, a.status, a.detail)
		}
	}
}

// Every route the server registers is documented.
func TestRoutesServedAreDocumented(t *testing.T) {
	t.Parallel()
	var documented []string
	for _, r := range api.Routes() {
		documented = append(documented, r.Pattern())
	}
	for _, p := range serverRoutes {
		if !slices.Contains(documented, p) {
			t.Errorf("the server serves %s, which api/openapi.yaml does not document", p)
		}
	}
}

// serverRoutes is what server.go and internal/admin/admin.go register: their calls of route, Handle and
// HandleFunc with a literal pattern, read from the source so a new route cannot be
// forgotten here.
func TestRoutesServerListIsCurrent(t *testing.T) {
	t.Parallel()
	var found []string
	fset := token.NewFileSet()
	for _, file := range []string{"server.go", "../admin/admin.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "route" && sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.Contains(p, "/") {
				return true
			}
			if p == "/" || p == "/v1/admin/" { // the catch-alls
				return true
			}
			found = append(found, p)
			return true
		})
	}
	want := slices.Clone(serverRoutes)
	sort.Strings(found)
	sort.Strings(want)
	if !slices.Equal(found, want) {
		t.Fatalf("server.go and admin.go register\n  %s\nserverRoutes lists\n  %s\n(update serverRoutes, and document any new route in api/openapi.yaml)",
			strings.Join(found, "\n  "), strings.Join(want, "\n  "))
	}
}
