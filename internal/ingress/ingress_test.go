package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

const testRules = `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: parking
descriptors:
  - key: merchant_id
    name: parking
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 2}}
    overflow: park
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: user_id
        name: marketing
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_counter}
        overflow: park
        queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
        sink: {url: "http://127.0.0.1:1/unused"}
---
domain: auth
descriptors:
  - key: auth_type
    value: login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: auth_type
    value: health
    rate_limit: {unlimited: true}
`

type env struct {
	t     *testing.T
	base  string
	nats  *natstest.Node
	main  *ingress.Main
	token string
}

func start(t *testing.T, mutate func(*ingress.Config)) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	return launch(t, path, nil, mutate)
}

// launch runs an ingress (Main, as cmd/ingress does) on rulesPaths with a private embedded
// NATS and Redis, the admin token s3cret-0123456789, a gRPC listener on a free port and the given
// extra flags; clock (nil = time.Now) decides admissions and checks.
func launch(t *testing.T, rulesPaths string, clock func() time.Time, mutate func(*ingress.Config), args ...string) *env {
	t.Helper()
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags(append([]string{"-rules", rulesPaths, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-admin-token", "s3cret-0123456789", "-shutdown-timeout", "2s"}, args...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &env{t: t, base: "http://" + m.Addr.String(), nats: n, main: m, token: cfg.AdminToken}
}

type reply struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

func (e *env) do(method, path string, body string, header ...string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost && path == "/v1/messages" {
		// These tests read the 202's depth and eta, which the own engine (the default)
		// answers only when asked; TestPlainAdmissionSendsNoRedisCommand covers the answer
		// unasked. A test's own Prefer header replaces this one.
		req.Header.Set("Prefer", "return=representation")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	rep := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	json.Unmarshal(raw, &rep.body)
	return rep
}

func submit(domain string, descriptor [][2]string, payload string, extra ...string) string {
	var d []string
	for _, kv := range descriptor {
		k, _ := json.Marshal(kv[0])
		v, _ := json.Marshal(kv[1])
		d = append(d, fmt.Sprintf(`{"key":%s,"value":%s}`, k, v))
	}
	s := fmt.Sprintf(`{"domain":%q,"descriptor":[%s],"payload":%s`, domain, strings.Join(d, ","), payload)
	for i := 0; i+1 < len(extra); i += 2 {
		s += fmt.Sprintf(",%q:%q", extra[i], extra[i+1])
	}
	return s + "}"
}

func merchant(id string) [][2]string { return [][2]string{{"merchant_id", id}} }

func wantHeaderInt(t *testing.T, h http.Header, name string, want int64) {
	t.Helper()
	got, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil || got != want {
		t.Fatalf("%s = %q, want %d", name, h.Get(name), want)
	}
}

func TestSubmitQueuedCountsDownThenRejects(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for i := 1; i <= 3; i++ {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-42"), fmt.Sprintf(`{"order_id":%d}`, i)))
		if r.code != 202 {
			t.Fatalf("submit %d: %d %s", i, r.code, r.raw)
		}
		if r.body["state"] != "queued" || r.body["depth"] != float64(i) || r.body["capacity"] != float64(3) || r.body["eta"] == nil {
			t.Fatalf("submit %d: body %s", i, r.raw)
		}
		id, _ := r.body["id"].(string)
		if ref, ok := queue.ParseID(id); r.header.Get("Location") != "/v1/messages/"+id || !ok || ref.Key != "m-42" || ref.RuleToken != "orders" {
			t.Fatalf("Location %q for id %q", r.header.Get("Location"), id)
		}
		wantHeaderInt(t, r.header, "X-RateLimit-Limit", 3)
		wantHeaderInt(t, r.header, "X-RateLimit-Remaining", int64(3-i))
		if got := r.header.Get("RateLimit"); got != fmt.Sprintf(`"orders";r=%d;t=1`, 3-i) {
			t.Fatalf("RateLimit = %q", got)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"orders";q=3;w=1` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
		if r.header.Get("Retry-After") != "" {
			t.Fatal("Retry-After on a 202")
		}
	}
	r := e.do("POST", "/v1/messages", submit("orders", merchant("m-42"), `{"order_id":4}`))
	if r.code != 429 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("full queue: %d %s", r.code, r.raw)
	}
	if typ, _ := r.body["type"].(string); !strings.HasSuffix(typ, "#quota-exceeded") {
		t.Fatalf("type %q", typ)
	}
	if vp, _ := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "orders" {
		t.Fatalf("violated-policies %v", r.body["violated-policies"])
	}
	// 3 messages ahead at 10/s: the honest wait is 0.3 s, rounded up to whole seconds.
	wantHeaderInt(t, r.header, "Retry-After", 1)
	wantHeaderInt(t, r.header, "X-RateLimit-Retry-After", 1)
	wantHeaderInt(t, r.header, "X-RateLimit-Remaining", 0)
	wantHeaderInt(t, r.header, "X-RateLimit-Limit", 3)

	// Another merchant has its own queue.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-43"), `1`)); r.code != 202 || r.body["depth"] != float64(1) {
		t.Fatalf("other key: %d %s", r.code, r.raw)
	}
}

func TestKeysWithSubjectSyntaxNeverCross(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	keys := []string{"a.b", "a.*", "a.>", ">", "*", "a b", "🦆", "a", "", strings.Repeat("k", 256)}
	for round := 1; round <= 2; round++ {
		for _, k := range keys {
			r := e.do("POST", "/v1/messages", submit("orders", merchant(k), `"x"`))
			if r.code != 202 || r.body["depth"] != float64(round) {
				t.Fatalf("key %q round %d: %d %s", k, round, r.code, r.raw)
			}
		}
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant(strings.Repeat("k", 257)), `"x"`)); r.code != 400 || r.body["field"] != "descriptor[0].value" {
		t.Fatalf("257-byte key: %d %s", r.code, r.raw)
	}
}

func TestSubmitParkedWhenFull(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	if r := e.do("POST", "/v1/messages", submit("parking", merchant("m-1"), `1`)); r.code != 202 || r.body["state"] != "queued" {
		t.Fatalf("first: %d %s", r.code, r.raw)
	}
	before := time.Now()
	r := e.do("POST", "/v1/messages", submit("parking", merchant("m-1"), `2`))
	if r.code != 202 || r.body["state"] != "parked" {
		t.Fatalf("second: %d %s", r.code, r.raw)
	}
	at, err := time.Parse(time.RFC3339, r.body["retry_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// One message ahead at 2/s: a place frees within 0.5 s; retry_at is rounded up to the second.
	if at.Before(before.Truncate(time.Second)) || at.After(before.Add(2*time.Second)) {
		t.Fatalf("retry_at %v, submitted at %v", at, before)
	}
	if r.header.Get("Location") == "" || r.header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("headers %v", r.header)
	}
	st := e.do("GET", r.header.Get("Location"), "")
	if st.code != 200 || st.body["state"] != "parked" || st.body["rule"] != "parking" || st.body["key"] != "m-1" {
		t.Fatalf("status: %d %s", st.code, st.raw)
	}
}

func TestAdmissionLimitParksUntilTheWindowFrees(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	user := [][2]string{{"message_type", "marketing"}, {"user_id", "u-7"}}
	if time.Now().Second() == 59 { // keep all three submissions inside one minute
		time.Sleep(1100 * time.Millisecond) // the scenario: a minute's window, so start in the next minute
	}
	sent := time.Now()
	for i := 0; i < 2; i++ {
		if r := e.do("POST", "/v1/messages", submit("messaging", user, `"hi"`)); r.code != 202 || r.body["state"] != "queued" {
			t.Fatalf("message %d: %d %s", i, r.code, r.raw)
		}
	}
	r := e.do("POST", "/v1/messages", submit("messaging", user, `"third"`))
	if r.code != 202 || r.body["state"] != "parked" {
		t.Fatalf("third: %d %s", r.code, r.raw)
	}
	at, _ := time.Parse(time.RFC3339, r.body["retry_at"].(string))
	// The sliding window counter (Cloudflare's estimate: prev × weight + current < limit)
	// admits again just after the minute in which both were sent ends — not "in a few
	// seconds" and not a constant. retry_at is that instant rounded up to the second.
	windowEnd := sent.Truncate(time.Minute).Add(time.Minute)
	if at.Before(windowEnd) || at.After(windowEnd.Add(time.Second)) {
		t.Fatalf("retry_at %v, the window ends %v", at, windowEnd)
	}
	wantHeaderInt(t, r.header, "X-RateLimit-Limit", 2)
	wantHeaderInt(t, r.header, "X-RateLimit-Remaining", 0)
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	first := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `{"n":1}`, "idempotency_key", "order-991"))
	if first.code != 202 {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	// The same key again, in the body and then as a header: the original answer, nothing enqueued.
	again := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `{"n":1}`, "idempotency_key", "order-991"))
	viaHeader := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `{"n":1}`), "Idempotency-Key", "order-991")
	for _, r := range []reply{again, viaHeader} {
		if r.code != 200 || r.body["id"] != first.body["id"] || r.body["state"] != "queued" {
			t.Fatalf("replay: %d %s (first %s)", r.code, r.raw, first.raw)
		}
	}
	next := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `{"n":2}`))
	if next.code != 202 || next.body["depth"] != float64(2) {
		t.Fatalf("depth after replays: %s", next.raw)
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `1`, "idempotency_key", "a"), "Idempotency-Key", "b"); r.code != 400 {
		t.Fatalf("conflicting keys: %d", r.code)
	}
}

func TestRejectedRequestDoesNotKeepTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for i := 0; i < 3; i++ {
		e.do("POST", "/v1/messages", submit("orders", merchant("m-5"), `1`))
	}
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-5"), `1`, "idempotency_key", "k1")); r.code != 429 {
		t.Fatalf("want 429, got %d", r.code)
	}
	// A retry with the same key on another (empty) merchant is a new admission, not a replay of the 429.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-6"), `1`, "idempotency_key", "k1")); r.code != 202 {
		t.Fatalf("retry after 429: %d %s", r.code, r.raw)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *ingress.Config) { c.MaxBody = 4096 })
	cases := []struct {
		name, body string
		code       int
		field      string
	}{
		{"malformed", `{"domain":`, 400, ""},
		{"not an object", `"orders"`, 400, "(body)"},
		{"missing domain", `{"descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}`, 400, "domain"},
		{"missing descriptor", `{"domain":"orders","payload":1}`, 400, "descriptor"},
		{"empty key", `{"domain":"orders","descriptor":[{"key":"","value":"m"}],"payload":1}`, 400, "descriptor[0].key"},
		{"value not a string", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":5}],"payload":1}`, 400, "descriptor[0].value"},
		{"missing payload", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}]}`, 400, "payload"},
		{"unknown field", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"priority":9}`, 400, "priority"},
		{"trailing data", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1} {}`, 400, ""},
		{"no rule", submit("orders", [][2]string{{"shop_id", "m"}}, `1`), 404, ""},
		{"no domain rule", submit("nope", merchant("m"), `1`), 404, ""},
		{"check-only rule", submit("auth", [][2]string{{"auth_type", "login"}}, `1`), 404, ""},
		{"too large", submit("orders", merchant("m"), `"`+strings.Repeat("x", 5000)+`"`), 413, ""},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/messages", c.body)
		if r.code != c.code || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s", c.name, r.code, r.raw)
			continue
		}
		if c.field != "" && r.body["field"] != c.field {
			t.Errorf("%s: field %v, want %q (%s)", c.name, r.body["field"], c.field, r.raw)
		}
	}
	// Nothing was queued by any of them.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m"), `1`)); r.body["depth"] != float64(1) {
		t.Fatalf("depth %v", r.body["depth"])
	}
}

func TestNATSDownIs503ThenRecovers(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `1`)); r.code != 202 {
		t.Fatalf("before: %d", r.code)
	}
	e.nats.Shutdown()
	r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `2`))
	if r.code != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("NATS down: %d %s %v", r.code, r.raw, r.header)
	}
	if rr := e.do("GET", "/readyz", ""); rr.code != 503 {
		t.Fatalf("readyz while NATS is down: %d", rr.code)
	}
	if err := e.nats.Restart(); err != nil {
		t.Fatal(err)
	}
	if !waittest.Within(20*time.Second, func() bool {
		r = e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `3`))
		return r.code == 202
	}) {
		t.Fatalf("no recovery: %d %s", r.code, r.raw)
	}
	// The acknowledged message survived; the refused one was never stored.
	if r.body["depth"] != float64(2) {
		t.Fatalf("depth after recovery %v", r.body["depth"])
	}
}

func TestStatusAndHealth(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	r := e.do("POST", "/v1/messages", submit("orders", merchant("m.1 *>"), `{"a":1}`))
	st := e.do("GET", "/v1/messages/"+r.body["id"].(string), "")
	if st.code != 200 || st.body["state"] != "queued" || st.body["key"] != "m.1 *>" || st.body["domain"] != "orders" || st.body["attempts"] != float64(0) {
		t.Fatalf("status: %d %s", st.code, st.raw)
	}
	for _, f := range []string{"created_at", "updated_at", "last_error", "rule"} {
		if _, ok := st.body[f]; !ok {
			t.Fatalf("status lacks %s: %s", f, st.raw)
		}
	}
	if r := e.do("GET", "/v1/messages/0190c3a2-0000-7000-8000-000000000000", ""); r.code != 404 {
		t.Fatalf("unknown id: %d", r.code)
	}
	if r := e.do("GET", "/healthz", ""); r.code != 200 {
		t.Fatalf("healthz %d", r.code)
	}
	if r := e.do("GET", "/readyz", ""); r.code != 200 {
		t.Fatalf("readyz %d %s", r.code, r.raw)
	}
	m := e.do("GET", "/metrics", "")
	for _, name := range []string{"sluice_admissions_total", "sluice_http_request_duration_seconds", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(m.raw, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if r := e.do("GET", "/v1/admin/queues", ""); r.code != 401 {
		t.Fatalf("admin without token: %d", r.code)
	}
	if r := e.do("GET", "/v1/admin/queues", "", "Authorization", "Bearer wrong"); r.code != 401 {
		t.Fatalf("admin with a wrong token: %d", r.code)
	}
}

func TestCheckLikeEnvoy(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	login := `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`
	for i := 0; i < 2; i++ {
		r := e.do("POST", "/v1/check", login)
		if r.code != 200 || r.body["overall_code"] != "OK" {
			t.Fatalf("check %d: %d %s", i, r.code, r.raw)
		}
		wantHeaderInt(t, r.header, "X-RateLimit-Remaining", int64(1-i))
	}
	r := e.do("POST", "/v1/check", login)
	if r.code != 429 || r.body["overall_code"] != "OVER_LIMIT" {
		t.Fatalf("over: %d %s", r.code, r.raw)
	}
	st := r.body["statuses"].([]any)[0].(map[string]any)
	if st["code"] != "OVER_LIMIT" || st["current_limit"].(map[string]any)["unit"] != "MINUTE" {
		t.Fatalf("status %v", st)
	}
	ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Unlimited and unmatched descriptors are OK and uncounted.
	other := `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"health"}]},{"entries":[{"key":"nope","value":"x"}]}],"hits_addend":100}`
	if r := e.do("POST", "/v1/check", other); r.code != 200 || r.body["overall_code"] != "OK" {
		t.Fatalf("unlimited: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", "/v1/check", `{"domain":"auth","descriptors":[]}`); r.code != 400 || r.body["field"] != "descriptors" {
		t.Fatalf("empty descriptors: %d %s", r.code, r.raw)
	}
}

func TestPayloadReachesTheQueueByteForByte(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	payload := `{ "b":1,  "a" : [1, 2.50, "é\u00e9"],"z":null }`
	r := e.do("POST", "/v1/messages", submit("orders", merchant("m-p"), payload))
	if r.code != 202 {
		t.Fatalf("%d %s", r.code, r.raw)
	}
	_, js := natstest.Connect(t, e.nats.URL())
	s, err := js.Stream(context.Background(), "SLUICE_Q_orders")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg.Data, []byte(payload)) {
		t.Fatalf("stored %q, submitted %q", msg.Data, payload)
	}
}

// Under a flood of a full key whose rule parks, every message answered "202 parked" can be
// looked up as parked: the record its admission wrote is taken over by the park, never
// deleted after it (a count's undo used to race the park's write).
func TestParkedUnderFloodKeepTheirStatus(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	const goroutines, each = 32, 8
	var mu sync.Mutex
	var parked []string
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := merchant(fmt.Sprintf("flood-%d", i%2))
				r := e.do("POST", "/v1/messages", submit("parking", key, `{"n":1}`))
				if r.code == 202 && r.body["state"] == "parked" {
					mu.Lock()
					parked = append(parked, r.body["id"].(string))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(parked) < goroutines*each/2 {
		t.Fatalf("only %d of %d parked", len(parked), goroutines*each)
	}
	// The batch goroutine flushes what it holds: every parked message reads as parked.
	for _, id := range parked {
		var st reply
		if !waittest.Within(5*time.Second, func() bool {
			st = e.do("GET", "/v1/messages/"+id, "")
			return st.code == 200 && st.body["state"] == "parked"
		}) {
			t.Errorf("parked %s: GET %d %s", id, st.code, st.raw)
		}
	}
}

// GET /v1/messages/{id} over HTTP: a queued message with its position; an id of the same
// rule and key that is nowhere (delivered or purged) is 404 no-longer-tracked naming its
// rule and key; anything else is 404 never-seen. No drainer runs here, so nothing leaves.
func TestMessageStatusOverHTTP(t *testing.T) {
	e := start(t, nil)
	var ids []string
	for i := 0; i < 2; i++ {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m 7/*"), `{"n":1}`))
		if r.code != 202 {
			t.Fatalf("submit: %d %s", r.code, r.raw)
		}
		ids = append(ids, r.body["id"].(string))
	}
	st := e.do("GET", "/v1/messages/"+ids[1], "")
	if st.code != 200 || st.body["state"] != "queued" || st.body["position"] != float64(1) || st.body["key"] != "m 7/*" || st.body["domain"] != "orders" {
		t.Fatalf("second queued message: %d %s", st.code, st.raw)
	}
	gone, err := queue.NewID("orders", "m 7/*")
	if err != nil {
		t.Fatal(err)
	}
	g := e.do("GET", "/v1/messages/"+gone, "")
	if g.code != 404 || g.body["type"] != "https://sluice.dev/problems#no-longer-tracked" || g.body["rule"] != "orders" || g.body["key"] != "m 7/*" || g.body["issued_at"] == nil {
		t.Fatalf("an id that is nowhere: %d %s", g.code, g.raw)
	}
	if g.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("content type %q", g.header.Get("Content-Type"))
	}
	for _, id := range []string{"nonsense", strings.Replace(gone, ".orders.", ".no-such-rule.", 1)} {
		if n := e.do("GET", "/v1/messages/"+id, ""); n.code != 404 || n.body["type"] != "https://sluice.dev/problems#never-seen" {
			t.Fatalf("GET %s: %d %s", id, n.code, n.raw)
		}
	}
}

// DELETE /v1/messages/{id} takes back a queued message: 200 with what it was, and then it
// is gone (404 no-longer-tracked, the key's depth one less); a second cancel finds nothing.
func TestCancelQueuedMessage(t *testing.T) {
	e := start(t, nil)
	var ids []string
	for i := 0; i < 3; i++ {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), fmt.Sprintf(`{"n":%d}`, i)))
		if r.code != 202 {
			t.Fatalf("submit: %d %s", r.code, r.raw)
		}
		ids = append(ids, r.body["id"].(string))
	}
	c := e.do("DELETE", "/v1/messages/"+ids[1], "")
	if c.code != 200 || c.body["cancelled"] != true || c.body["state"] != "queued" || c.body["position"] != float64(1) {
		t.Fatalf("cancel: %d %s", c.code, c.raw)
	}
	if g := e.do("GET", "/v1/messages/"+ids[1], ""); g.code != 404 || g.body["type"] != "https://sluice.dev/problems#no-longer-tracked" {
		t.Fatalf("GET after cancel: %d %s", g.code, g.raw)
	}
	if g := e.do("GET", "/v1/messages/"+ids[2], ""); g.code != 200 || g.body["position"] != float64(1) {
		t.Fatalf("the message behind it moved up: %d %s", g.code, g.raw)
	}
	if again := e.do("DELETE", "/v1/messages/"+ids[1], ""); again.code != 404 {
		t.Fatalf("second cancel: %d %s", again.code, again.raw)
	}
	// The depth estimate counts it out: the next admission sees two ahead of it, not three.
	r := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `{"n":9}`))
	if r.code != 202 || r.body["depth"] != float64(3) {
		t.Fatalf("submit after cancel: %d %s", r.code, r.raw)
	}
}
