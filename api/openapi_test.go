package api_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/httpx"
)

type obj = map[string]any

func load(t *testing.T) obj {
	t.Helper()
	var doc obj
	if err := yaml.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc
}

// get walks doc along keys; nil when any step is missing or not an object.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func asObj(t *testing.T, v any, where string) obj {
	t.Helper()
	m, ok := v.(obj)
	if !ok {
		t.Fatalf("%s: want an object with string keys, got %T", where, v)
	}
	return m
}

// resolve follows a chain of $refs from v.
func resolve(t *testing.T, doc obj, v any) obj {
	t.Helper()
	for range 10 {
		m, ok := v.(obj)
		if !ok {
			t.Fatalf("want an object, got %T", v)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		target, err := pointer(doc, ref)
		if err != nil {
			t.Fatal(err)
		}
		v = target
	}
	t.Fatal("$ref chain too long")
	return nil
}

// pointer resolves a local JSON Pointer reference ("#/components/schemas/Entry").
func pointer(doc obj, ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only local references are used here", ref)
	}
	var cur any = doc
	for _, tok := range strings.Split(rest, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(obj)
		if !ok {
			return nil, fmt.Errorf("$ref %q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("$ref %q does not resolve (no %q)", ref, tok)
		}
	}
	return cur, nil
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations yields every operation of paths and webhooks, with where it is.
func operations(t *testing.T, doc obj) map[string]obj {
	t.Helper()
	ops := map[string]obj{}
	for _, section := range []string{"paths", "webhooks"} {
		for path, item := range asObj(t, doc[section], section) {
			item := asObj(t, item, section+" "+path)
			for _, m := range httpMethods {
				if op, ok := item[m]; ok {
					ops[section+" "+strings.ToUpper(m)+" "+path] = asObj(t, op, path+" "+m)
				}
			}
		}
	}
	return ops
}

func TestDocumentIsOpenAPI31(t *testing.T) {
	t.Parallel()
	doc := load(t)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi = %q, want 3.1.x", doc["openapi"])
	}
	if get(doc, "info", "title") == nil || get(doc, "info", "version") == nil {
		t.Fatal("info.title and info.version are required")
	}
	allowed := []string{"openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks", "components", "security", "tags", "externalDocs"}
	for k := range doc {
		if !slices.Contains(allowed, k) && !strings.HasPrefix(k, "x-") {
			t.Errorf("unknown top-level field %q", k)
		}
	}
	if s := get(doc, "components", "securitySchemes", "adminToken"); get(s, "type") != "http" || get(s, "scheme") != "bearer" {
		t.Fatalf("adminToken scheme = %v, want http bearer", s)
	}
}

func TestEveryOperationHasResponsesAndUniqueID(t *testing.T) {
	t.Parallel()
	doc := load(t)
	code := regexp.MustCompile(`^([1-5][0-9][0-9]|[1-5]XX|default)$`)
	ids := map[string]string{}
	for where, op := range operations(t, doc) {
		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%s: no operationId", where)
		} else if other, dup := ids[id]; dup {
			t.Errorf("operationId %q used by %s and %s", id, other, where)
		}
		ids[id] = where
		responses := asObj(t, op["responses"], where+" responses")
		if len(responses) == 0 {
			t.Errorf("%s: no responses", where)
		}
		for c, r := range responses {
			if !code.MatchString(c) {
				t.Errorf("%s: response key %q is not a status code", where, c)
			}
			if d, _ := resolve(t, doc, r)["description"].(string); d == "" {
				t.Errorf("%s %s: a response needs a description", where, c)
			}
		}
		if rb, ok := op["requestBody"]; ok {
			if len(asObj(t, resolve(t, doc, rb)["content"], where+" requestBody.content")) == 0 {
				t.Errorf("%s: request body without content", where)
			}
		}
	}
}

// Every {placeholder} of a path is a required path parameter, and every path parameter
// is a placeholder.
func TestPathParameters(t *testing.T) {
	t.Parallel()
	doc := load(t)
	ph := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range asObj(t, doc["paths"], "paths") {
		item := asObj(t, item, path)
		want := map[string]bool{}
		for _, m := range ph.FindAllStringSubmatch(path, -1) {
			want[m[1]] = true
		}
		for _, method := range httpMethods {
			op, ok := item[method]
			if !ok {
				continue
			}
			params, _ := get(op, "parameters").([]any)
			if shared, ok := item["parameters"].([]any); ok {
				params = append(params, shared...)
			}
			got := map[string]bool{}
			for _, p := range params {
				p := resolve(t, doc, p)
				if p["in"] != "path" {
					continue
				}
				name, _ := p["name"].(string)
				if p["required"] != true {
					t.Errorf("%s %s: path parameter %q must be required", method, path, name)
				}
				got[name] = true
			}
			for n := range want {
				if !got[n] {
					t.Errorf("%s %s: no parameter for {%s}", method, path, n)
				}
			}
			for n := range got {
				if !want[n] {
					t.Errorf("%s %s: parameter %q is not in the path", method, path, n)
				}
			}
		}
	}
}

// Every $ref resolves, and every component is used (a stale definition is a lie in waiting).
func TestRefsResolveAndComponentsAreUsed(t *testing.T) {
	t.Parallel()
	doc := load(t)
	used := map[string]bool{}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case obj:
			if ref, ok := v["$ref"]; ok {
				s, _ := ref.(string)
				if _, err := pointer(doc, s); err != nil {
					t.Errorf("at %s: %v", at, err)
				}
				used[s] = true
			}
			for k, x := range v {
				walk(x, at+"/"+k)
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s/%d", at, i))
			}
		case map[any]any:
			t.Errorf("at %s: a mapping with non-string keys (quote status codes)", at)
		}
	}
	walk(doc, "#")
	refs := 0
	for kind, defs := range asObj(t, doc["components"], "components") {
		if kind == "securitySchemes" {
			continue // used by name in security requirements, not by $ref
		}
		for name := range asObj(t, defs, "components/"+kind) {
			refs++
			if ref := "#/components/" + kind + "/" + name; !used[ref] {
				t.Errorf("%s is never referenced", ref)
			}
		}
	}
	if refs < 20 {
		t.Fatalf("only %d components: the walk found nothing?", refs)
	}
}

// The operations of docs/http-api.md and the ingress, no more and no fewer;
// internal/ingress/routes_test.go checks them against the server, docs/docs_test.go against
// the page.
var documented = []api.Route{
	{Method: "POST", Path: "/v1/messages", OperationID: "submitMessage"},
	{Method: "GET", Path: "/v1/messages/{id}", OperationID: "getMessage"},
	{Method: "DELETE", Path: "/v1/messages/{id}", OperationID: "cancelMessage"},
	{Method: "POST", Path: "/v1/check", OperationID: "check"},
	{Method: "POST", Path: "/json", OperationID: "envoyJson"},
	{Method: "GET", Path: "/v1/admin/rules", OperationID: "listRules", Admin: true},
	{Method: "GET", Path: "/v1/admin/queues", OperationID: "listQueues", Admin: true},
	{Method: "GET", Path: "/v1/admin/queues/{name}", OperationID: "getQueue", Admin: true},
	{Method: "PATCH", Path: "/v1/admin/queues/{name}", OperationID: "tuneQueue", Admin: true},
	{Method: "POST", Path: "/v1/admin/queues/{name}/purge", OperationID: "purgeQueue", Admin: true},
	{Method: "GET", Path: "/v1/admin/queues/{name}/keys", OperationID: "hotKeys", Admin: true},
	{Method: "POST", Path: "/v1/admin/queues/{name}/keys", OperationID: "tuneQueueKeys", Admin: true},
	{Method: "GET", Path: "/v1/admin/queues/{name}/keys/{key}", OperationID: "getQueueKey", Admin: true},
	{Method: "PATCH", Path: "/v1/admin/queues/{name}/keys/{key}", OperationID: "tuneQueueKey", Admin: true},
	{Method: "DELETE", Path: "/v1/admin/queues/{name}/keys/{key}", OperationID: "purgeQueueKey", Admin: true},
	{Method: "GET", Path: "/v1/admin/dead", OperationID: "listDead", Admin: true},
	{Method: "POST", Path: "/v1/admin/dead/{id}/replay", OperationID: "replayDead", Admin: true},
	{Method: "POST", Path: "/v1/admin/dead/replay", OperationID: "replayAllDead", Admin: true},
	{Method: "GET", Path: "/v1/admin/whoami", OperationID: "whoami", Admin: true},
	{Method: "GET", Path: "/v1/admin/audit", OperationID: "listAudit", Admin: true},
	{Method: "GET", Path: "/metrics", OperationID: "metrics"},
	{Method: "GET", Path: "/ui/", OperationID: "console"},
	{Method: "GET", Path: "/healthz", OperationID: "healthz"},
	{Method: "GET", Path: "/readyz", OperationID: "readyz"},
	{Method: "GET", Path: "/openapi.yaml", OperationID: "openapi"},
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	got := api.Routes()
	if !slices.Equal(got, documented) {
		t.Fatalf("Routes() =\n%v\nwant\n%v", got, documented)
	}
	got[0].Path = "/changed"
	if api.Routes()[0].Path != "/v1/messages" {
		t.Fatal("Routes returns shared state")
	}
	// Every pattern registers on a ServeMux, without conflicts: the server can use them as is.
	mux := http.NewServeMux()
	for _, r := range api.Routes() {
		mux.HandleFunc(r.Pattern(), func(http.ResponseWriter, *http.Request) {})
	}
	req, _ := http.NewRequest("GET", "/v1/admin/queues/orders/keys/a%2Fb%20%F0%9F%99%82", nil)
	if _, pattern := mux.Handler(req); pattern != "GET /v1/admin/queues/{name}/keys/{key}" {
		t.Fatalf("an escaped key matched %q", pattern)
	}
}

// Admin operations are the ones with the bearer scheme, and they document 401.
func TestAdminSecurity(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for _, r := range api.Routes() {
		op := get(doc, "paths", r.Path, strings.ToLower(r.Method))
		responses := asObj(t, get(op, "responses"), r.Pattern())
		_, has401 := responses["401"]
		_, has403 := responses["403"]
		// Submit, cancel and the checks need a token only under -submit-tokens: optional
		// security.
		sec := fmt.Sprint(get(op, "security"))
		submit := strings.Contains(sec, "submitToken") || strings.Contains(sec, "checkToken")
		if (r.Admin || submit) != has401 {
			t.Errorf("%s: admin %v, submit token %v, but 401 documented %v", r.Pattern(), r.Admin, submit, has401)
		}
		// Calls that change something answer 403 to a read token.
		if wantForbidden := submit || (r.Admin && r.Method != "GET"); wantForbidden != has403 {
			t.Errorf("%s: 403 documented %v, want %v", r.Pattern(), has403, wantForbidden)
		}
		if r.Admin != strings.HasPrefix(r.Path, "/v1/admin/") {
			t.Errorf("%s: admin %v", r.Pattern(), r.Admin)
		}
	}
}

func responseOf(t *testing.T, doc obj, path, method, code string) obj {
	t.Helper()
	r := get(doc, "paths", path, method, "responses", code)
	if r == nil {
		t.Fatalf("%s %s: no %s response", method, path, code)
	}
	return resolve(t, doc, r)
}

func headersOf(t *testing.T, r obj) []string {
	var hs []string
	for h := range asObj(t, r["headers"], "headers") {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	return hs
}

// The submit table of docs/http-api.md: every outcome, with its headers.
func TestSubmitTable(t *testing.T) {
	t.Parallel()
	doc := load(t)
	rate := []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	for _, code := range []string{"200", "202", "400", "404", "413", "429", "503"} {
		responseOf(t, doc, "/v1/messages", "post", code)
	}
	for code, want := range map[string][]string{
		"202": append([]string{"Location"}, rate...),
		"429": append([]string{"Retry-After", "X-RateLimit-Retry-After"}, rate...),
		"503": {"Retry-After"},
	} {
		got := headersOf(t, responseOf(t, doc, "/v1/messages", "post", code))
		for _, h := range want {
			if !slices.Contains(got, h) {
				t.Errorf("POST /v1/messages %s: no %s header (has %v)", code, h, got)
			}
		}
	}
	for _, code := range []string{"400", "404", "413", "429", "503"} {
		r := responseOf(t, doc, "/v1/messages", "post", code)
		if get(r, "content", "application/problem+json", "schema", "$ref") != "#/components/schemas/Problem" {
			t.Errorf("POST /v1/messages %s is not problem+json", code)
		}
	}
	for _, code := range []string{"200", "429"} {
		r := responseOf(t, doc, "/v1/check", "post", code)
		if get(r, "content", "application/json", "schema", "$ref") != "#/components/schemas/CheckResponse" {
			t.Errorf("POST /v1/check %s is not a CheckResponse", code)
		}
	}
	var idem bool
	for _, p := range get(doc, "paths", "/v1/messages", "post", "parameters").([]any) {
		p := resolve(t, doc, p)
		idem = idem || p["in"] == "header" && p["name"] == "Idempotency-Key"
	}
	if !idem {
		t.Error("POST /v1/messages: no Idempotency-Key header parameter")
	}
	fields := asObj(t, get(doc, "components", "schemas", "SubmitRequest", "properties"), "SubmitRequest")
	for _, f := range []string{"domain", "descriptor", "payload", "idempotency_key"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("SubmitRequest has no %s", f)
		}
	}
}

// Every problem type the server can send is in the ProblemType enum.
func TestProblemTypes(t *testing.T) {
	t.Parallel()
	doc := load(t)
	enum, _ := get(doc, "components", "schemas", "ProblemType", "enum").([]any)
	for _, typ := range []string{httpx.TypeInvalidRequest, httpx.TypeNoRule, httpx.TypeTooLarge, httpx.TypeQuotaExceeded,
		httpx.TypeUnavailable, httpx.TypeNotFound, httpx.TypeUnauthorized, httpx.TypeInternal, httpx.TypeNeverSeen,
		httpx.TypeNotTracked, httpx.TypeNotCancellable, httpx.TypeForbidden} {
		if !slices.Contains(enum, any(typ)) {
			t.Errorf("problem type %s is not documented", typ)
		}
	}
	props := asObj(t, get(doc, "components", "schemas", "Problem", "properties"), "Problem")
	for _, f := range []string{"type", "title", "status", "detail", "field", "violated-policies"} {
		if _, ok := props[f]; !ok {
			t.Errorf("Problem has no %s", f)
		}
	}
}

// The sink delivery contract is documented as a webhook with every header of docs/delivery.md.
func TestSinkWebhook(t *testing.T) {
	t.Parallel()
	doc := load(t)
	op := get(doc, "webhooks", "sinkDelivery", "post")
	if op == nil {
		t.Fatal("no webhooks.sinkDelivery.post")
	}
	var got []string
	for _, p := range get(op, "parameters").([]any) {
		p := resolve(t, doc, p)
		if p["in"] == "header" {
			got = append(got, p["name"].(string))
		}
	}
	for _, h := range []string{"Idempotency-Key", "Sluice-Message-Id", "Sluice-Attempt", "Sluice-Rule", "Sluice-Key", "Sluice-Enqueued-At"} {
		if !slices.Contains(got, h) {
			t.Errorf("sink webhook: no %s header", h)
		}
	}
}

// The admin response shapes carry the fields docs/http-api.md names.
func TestAdminShapes(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for schema, fields := range map[string][]string{
		"Queue":         {"capacity", "outflow", "total_outflow", "paused", "depth", "active_keys", "parked", "dead", "drained_per_second"},
		"QueueKey":      {"queue", "key", "depth", "next_dispatch_at"},
		"DeadList":      {"messages", "next"},
		"DeadMessage":   {"id", "rule", "key", "state", "reason", "attempts", "last_error", "created_at", "updated_at"},
		"QueuePatch":    {"outflow", "total_outflow", "capacity", "paused"},
		"QueueReset":    {"reset"},
		"MessageStatus": {"id", "domain", "rule", "key", "state", "attempts", "created_at", "updated_at", "last_error"},
	} {
		props := asObj(t, get(doc, "components", "schemas", schema, "properties"), schema)
		for _, f := range fields {
			if _, ok := props[f]; !ok {
				t.Errorf("%s has no %s", schema, f)
			}
		}
	}
}
