package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/process/ingress"
)

// Submit tokens of the submission security tests: two callers of domain orders, one of
// messaging, one of any domain.
const (
	ordersA   = "orders-a-secret-0123456789"
	ordersB   = "orders-b-secret-0123456789"
	messaging = "messaging-secret-012345678"
	anyDomain = "any-domain-secret-01234567"
)

// startSecured runs an ingress on testRules with -submit-tokens holding the four tokens
// above, and any further flags.
func startSecured(t *testing.T, mutate func(*ingress.Config), args ...string) *env {
	t.Helper()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tokens := filepath.Join(dir, "submit-tokens")
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte("orders-a submit:orders "+ordersA+"\norders-b submit:orders "+ordersB+
		"\nmessaging submit:messaging "+messaging+"\nany submit "+anyDomain+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return launch(t, rules, nil, mutate, append([]string{"-submit-tokens", tokens}, args...)...)
}

func bearerOf(token string) []string { return []string{"Authorization", "Bearer " + token} }

// with appends header pairs to a request's.
func with(h []string, more ...string) []string { return append(append([]string(nil), h...), more...) }

// Item 1 of #32: a domain token's batch passes the same authorization as its single
// submissions. An item for another domain refuses the whole batch with 403 naming the
// item; nothing of it is stored — JSON arrays and NDJSON, one item or mixed.
func TestBatchAuthorizesEveryItem(t *testing.T) {
	t.Parallel()
	e := startSecured(t, nil)
	order := func(n, key string) string {
		return submit("orders", merchant("m-"+n), `{"n":1}`, "idempotency_key", key)
	}
	marketing := submit("messaging", [][2]string{{"message_type", "marketing"}, {"user_id", "u-1"}}, `{"n":1}`)

	// The single submission was refused already; its one-item batch was not.
	if r := e.do("POST", "/v1/messages", order("1", "k-single"), bearerOf(messaging)...); r.code != 403 || r.body["field"] != "domain" {
		t.Errorf("single order with a messaging token: %d %s, want 403 naming domain", r.code, r.raw)
	}
	nd := with(bearerOf(messaging), "Content-Type", "application/x-ndjson")
	for _, c := range []struct {
		name, body string
		header     []string
		field      string
	}{
		{"json one item", "[" + order("1", "k-json-1") + "]", bearerOf(messaging), "[0].domain"},
		{"json mixed", "[" + marketing + "," + order("2", "k-json-2") + "]", bearerOf(messaging), "[1].domain"},
		{"ndjson one item", order("3", "k-nd-3") + "\n", nd, "[0].domain"},
		{"ndjson mixed", marketing + "\n" + marketing + "\n" + order("4", "k-nd-4") + "\n", nd, "[2].domain"},
		{"json refused first", "[" + order("5", "k-json-5") + "," + marketing + "]", bearerOf(messaging), "[0].domain"},
	} {
		name := c.name
		r := e.do("POST", "/v1/messages", c.body, c.header...)
		if r.code != 403 || r.body["type"] != "https://sluice.dev/problems#forbidden" || r.body["field"] != c.field ||
			!strings.Contains(r.raw, "refused whole") {
			t.Errorf("%s: %d %s, want 403 naming %s", name, r.code, r.raw, c.field)
		}
	}
	// Nothing of a refused batch was stored: the marketing items' key is empty, and the
	// orders keys' idempotency keys are free (202, not a repeat's 200).
	if r := e.do("GET", "/v1/admin/queues/marketing/keys", "", "Authorization", "Bearer "+e.token); r.code != 200 || strings.Contains(r.raw, "u-1") {
		t.Errorf("marketing keys after refused batches: %d %s", r.code, r.raw)
	}
	for n, key := range map[string]string{"1": "k-json-1", "2": "k-json-2", "3": "k-nd-3", "4": "k-nd-4"} {
		if r := e.do("POST", "/v1/messages", order(n, key), bearerOf(ordersA)...); r.code != 202 {
			t.Errorf("order %s after its batch was refused: %d %s, want 202 (new)", n, r.code, r.raw)
		}
	}
	// A batch the token may submit whole is admitted, item by item; a token of any domain
	// submits to every domain.
	if code, a := e.batch(t, marketing+"\n"+marketing+"\n", nd...); code != 200 || a.Accepted != 2 {
		t.Errorf("messaging token's own batch: %d %+v", code, a)
	}
	if code, a := e.batch(t, "["+order("6", "k-any-6")+","+marketing+"]", bearerOf(anyDomain)...); code != 200 || a.Accepted != 2 {
		t.Errorf("any-domain token's mixed batch: %d %+v", code, a)
	}
	// Without a token, a batch is 401 as a single submission is.
	if r := e.do("POST", "/v1/messages", "["+marketing+"]"); r.code != 401 {
		t.Errorf("batch without a token: %d %s", r.code, r.raw)
	}
}

// Item 7 of #32: a submission may not set credentials, forwarding, Host or hop-by-hop
// headers on its deliveries: 400 naming the header, for a single submission, a scheduled
// one and every item of a batch (JSON array and NDJSON); the header as written is named.
func TestSubmitRefusesForgedDeliveryHeaders(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for _, name := range []string{
		"Authorization", "authorization", "Cookie", "Proxy-Authorization", "Proxy-Authenticate", "proxy-connection",
		"Forwarded", "X-Forwarded-For", "x-forwarded-host", "X-Forwarded-Proto", "X-Real-IP", "Host",
		"Connection", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
		// Standard Webhooks' signature headers are the drainer's (-sign-scheme).
		"Webhook-Signature", "webhook-id", "Webhook-Timestamp",
	} {
		withHeader := func(m string, extra ...string) string {
			s := submit("orders", merchant(m), `{"n":1}`, extra...)
			return s[:len(s)-1] + `,"headers":{"X-Tenant":"t-1",` + strconv.Quote(name) + `:"forged"}}`
		}
		field := "headers." + name
		if r := e.do("POST", "/v1/messages", withHeader("h-1")); r.code != 400 || r.body["field"] != field {
			t.Errorf("%s: %d %s, want 400 naming %s", name, r.code, r.raw, field)
		}
		if r := e.do("POST", "/v1/messages", withHeader("h-2", "delay", "1h")); r.code != 400 || r.body["field"] != field {
			t.Errorf("%s, scheduled: %d %s, want 400 naming %s", name, r.code, r.raw, field)
		}
		ok := submit("orders", merchant("ok-"+name), `{"n":1}`)
		code, a := e.batch(t, "["+ok+","+withHeader("h-3")+"]")
		if code != 200 || a.Accepted != 1 || a.Items[1]["status"] != float64(400) || a.Items[1]["field"] != "[1]."+field {
			t.Errorf("%s, batch: %d %+v, want item 1 refused naming [1].%s", name, code, a, field)
		}
		code, a = e.batch(t, withHeader("h-4")+"\n", "Content-Type", "application/x-ndjson")
		if code != 200 || a.Refused != 1 || a.Items[0]["field"] != "[0]."+field {
			t.Errorf("%s, NDJSON batch: %d %+v, want item 0 refused naming [0].%s", name, code, a, field)
		}
	}
	// Headers of a message's own are still welcome.
	s := submit("orders", merchant("h-5"), `{"n":1}`)
	if r := e.do("POST", "/v1/messages", s[:len(s)-1]+`,"headers":{"X-Tenant":"t-1","Traceparent-Note":"x","X-Forwarded":"not a forwarding header"}}`); r.code != 202 {
		t.Errorf("own headers: %d %s, want 202", r.code, r.raw)
	}
}

// rawPost posts body to url with exactly the Content-Type values given (none for nil) and
// extra header pairs.
func rawPost(t *testing.T, url string, types []string, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range types {
		req.Header.Add("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	rep := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	json.Unmarshal(raw, &rep.body)
	return rep
}

// Item 5 of #32: a submission — one, a JSON array or NDJSON — needs a JSON media type. What
// a cross-site page can send without a CORS preflight (a form's types, text/plain, a Blob
// without a type) is 415 naming Content-Type, and nothing is stored; there is no CORS.
func TestSubmitRequiresJSONMediaType(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	url := e.base + "/v1/messages"
	one := func(key string) string {
		return submit("orders", merchant("ct-"+key), `{"n":1}`, "idempotency_key", key)
	}
	for i, types := range [][]string{
		nil, {""}, {"text/plain"}, {"text/plain;charset=UTF-8"}, {"application/x-www-form-urlencoded"},
		{"multipart/form-data; boundary=x"}, {"application/json; charset=iso-8859-1"}, {"application/xml"},
		{"application/json", "application/json"}, {"application/json;;"}, {"application/jsonl-ish"},
	} {
		key := "k-" + strconv.Itoa(i)
		for name, body := range map[string]string{
			"single":     one(key),
			"json array": "[" + one(key+"-a") + "]",
			"ndjson":     one(key+"-n") + "\n" + one(key+"-n2") + "\n",
		} {
			r := rawPost(t, url, types, body, "Origin", "https://evil.example")
			if r.code != 415 || r.header.Get("Content-Type") != "application/problem+json" || r.body["field"] != "Content-Type" {
				t.Errorf("%s with Content-Type %q: %d %s, want 415 naming Content-Type", name, types, r.code, r.raw)
			}
			if r.header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s: a CORS answer: %v", name, r.header)
			}
		}
		// Nothing was stored: the same key is new (202, not a repeat's 200).
		if r := e.do("POST", "/v1/messages", one(key)); r.code != 202 {
			t.Errorf("after %q: %d %s, want 202 (the refused submission stored nothing)", types, r.code, r.raw)
		}
	}
	// JSON's own types pass, parameters and case aside; NDJSON under either name.
	for i, c := range []struct {
		ct, body string
		batch    bool
	}{
		{"application/json; charset=UTF-8", one("ok-1"), false},
		{"Application/JSON", one("ok-2"), false},
		{"application/json", "[" + one("ok-3") + "]", true},
		{"application/x-ndjson", one("ok-4") + "\n", true},
		{"application/jsonl; charset=utf-8", one("ok-5") + "\n" + one("ok-6"), true},
	} {
		r := rawPost(t, url, []string{c.ct}, c.body)
		if want := map[bool]int{false: 202, true: 200}[c.batch]; r.code != want {
			t.Errorf("case %d, %s: %d %s, want %d", i, c.ct, r.code, r.raw, want)
		}
	}
	// No CORS on any route: a preflight is not answered with permission, nor is any call.
	for _, path := range []string{"/v1/messages", "/v1/messages/x", "/v1/check", "/json", "/v1/admin/queues", "/openapi.yaml", "/ui/", "/metrics"} {
		for _, method := range []string{"OPTIONS", "GET", "POST"} {
			req, _ := http.NewRequest(method, e.base+path, nil)
			req.Header.Set("Origin", "https://evil.example")
			req.Header.Set("Authorization", "Bearer "+e.token)
			if method == "OPTIONS" {
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "content-type, authorization")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for k := range resp.Header {
				if strings.HasPrefix(k, "Access-Control-") {
					t.Errorf("%s %s answered %d with %s: %v", method, path, resp.StatusCode, k, resp.Header)
				}
			}
		}
	}
}

// Item 6 of #32: with -submit-tokens, idempotency keys are the caller's own. Another
// caller guessing a key gets a message of its own — never a 200 with the victim's message,
// nor a 422 naming its id — and cancelling what it got leaves the victim's message queued;
// for a single submission, a scheduled one and a batch item. The owner still gets its
// repeat (200) and its 422, naming its own message.
func TestIdempotencyKeysAreTheCallers(t *testing.T) {
	t.Parallel()
	e := startSecured(t, nil)
	order := func(key, payload string, extra ...string) string {
		return submit("orders", merchant("m-42"), payload, append([]string{"idempotency_key", key}, extra...)...)
	}
	victim := map[string]string{} // key -> the victim's message id
	for _, c := range []struct{ key, body string }{
		{"order-2001", order("order-2001", `{"total":10}`)},
		{"order-3001", order("order-3001", `{"total":30}`, "delay", "1h")},
	} {
		r := e.do("POST", "/v1/messages", c.body, bearerOf(ordersA)...)
		if r.code != 202 {
			t.Fatalf("victim's %s: %d %s", c.key, r.code, r.raw)
		}
		victim[c.key] = r.body["id"].(string)
	}
	var attackers []string
	seen := func(what string, r reply) {
		t.Helper()
		for k, id := range victim {
			if strings.Contains(r.raw, id) {
				t.Errorf("%s: the answer names the victim's message of %s: %d %s", what, k, r.code, r.raw)
			}
		}
		switch r.code {
		case 202:
			attackers = append(attackers, r.body["id"].(string))
		case 200, 422: // the attacker's own key used again: its own earlier message
			if !slices.ContainsFunc(attackers, func(id string) bool { return strings.Contains(r.raw, id) }) {
				t.Errorf("%s: %d %s, want a message of the attacker's own", what, r.code, r.raw)
			}
		default:
			t.Errorf("%s: %d %s, want 202: a message of the attacker's own", what, r.code, r.raw)
		}
	}
	attacker := bearerOf(ordersB)
	seen("same key, same payload", e.do("POST", "/v1/messages", order("order-2001", `{"total":10}`), attacker...))
	seen("same key, other payload", e.do("POST", "/v1/messages", order("order-2001", `{"total":0}`), attacker...))
	seen("same key in the header", e.do("POST", "/v1/messages", submit("orders", merchant("m-43"), `1`), with(attacker, "Idempotency-Key", "order-2001")...))
	seen("scheduled, same payload", e.do("POST", "/v1/messages", order("order-3001", `{"total":30}`, "delay", "1h"), attacker...))
	seen("scheduled, other payload", e.do("POST", "/v1/messages", order("order-3001", `{"total":0}`, "delay", "1h"), attacker...))
	code, a := e.batch(t, "["+order("order-2001", `{"total":1}`)+","+submit("orders", merchant("m-44"), `1`, "idempotency_key", "order-3001")+"]", attacker...)
	if code != 200 || len(a.Items) != 2 {
		t.Fatalf("attacker's batch: %d %+v", code, a)
	}
	for i, it := range a.Items {
		raw, _ := json.Marshal(it)
		seen("batch item "+strconv.Itoa(i), reply{code: int(it["status"].(float64)), body: it, raw: string(raw)})
	}
	// The attacker cancels what it got: the victim's messages are where they were.
	for _, id := range attackers {
		if r := e.do("DELETE", "/v1/messages/"+id, "", attacker...); r.code != 200 {
			t.Errorf("attacker cancels its own %s: %d %s", id, r.code, r.raw)
		}
	}
	for k, id := range victim {
		// Read with the victim's own token: with -submit-tokens a status needs one.
		if r := e.do("GET", "/v1/messages/"+id, "", bearerOf(ordersA)...); r.code != 200 || (r.body["state"] != "queued" && r.body["state"] != "scheduled") {
			t.Errorf("victim's %s after the attack: %d %s", k, r.code, r.raw)
		}
	}
	// The owner's own key works as before: its repeat is 200 with its message, other work
	// under it a 422 naming its message.
	if r := e.do("POST", "/v1/messages", order("order-2001", `{"total":10}`), bearerOf(ordersA)...); r.code != 200 || r.body["id"] != victim["order-2001"] {
		t.Errorf("victim's repeat: %d %s, want 200 with %s", r.code, r.raw, victim["order-2001"])
	}
	if r := e.do("POST", "/v1/messages", order("order-2001", `{"total":11}`), bearerOf(ordersA)...); r.code != 422 || !strings.Contains(r.raw, victim["order-2001"]) {
		t.Errorf("victim's other work under its key: %d %s, want 422 naming its message", r.code, r.raw)
	}
	if r := e.do("POST", "/v1/messages", order("order-3001", `{"total":30}`, "delay", "1h"), bearerOf(ordersA)...); r.code != 200 || r.body["id"] != victim["order-3001"] {
		t.Errorf("victim's scheduled repeat: %d %s, want 200 with %s", r.code, r.raw, victim["order-3001"])
	}
}

// Item 6 of #32, across the change: idempotency keys claimed before they were scoped (an
// ingress without -submit-tokens, as every earlier version) keep answering the request that
// claimed them once an ingress on the same NATS and Redis scopes keys: the same request
// repeated is the message already accepted (200, stored once), other work under the key is
// a message of its own and is not told the first one's id.
func TestIdempotencyKeysClaimedBeforeScoping(t *testing.T) {
	t.Parallel()
	open := start(t, nil)
	order := func(payload string) string {
		return submit("orders", merchant("m-7"), payload, "idempotency_key", "order-7")
	}
	first := open.do("POST", "/v1/messages", order(`{"total":7}`))
	if first.code != 202 {
		t.Fatalf("open mode: %d %s", first.code, first.raw)
	}
	id := first.body["id"].(string)

	// An ingress with submit tokens on the same stores.
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	tokens := filepath.Join(dir, "submit-tokens")
	os.WriteFile(rules, []byte(testRules), 0o644)
	os.WriteFile(tokens, []byte("orders-a submit:orders "+ordersA+"\norders-b submit:orders "+ordersB+"\n"), 0o600)
	cfg, err := ingress.ParseFlags([]string{"-rules", rules, "-http", "127.0.0.1:0", "-grpc", "", "-nats", open.main.NATSURL,
		"-redis", open.main.RedisURL, "-submit-tokens", tokens, "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
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
	scoped := &env{t: t, base: "http://" + m.Addr.String(), main: m}

	if r := scoped.do("POST", "/v1/messages", order(`{"total":7}`), bearerOf(ordersA)...); r.code != 200 || r.body["id"] != id {
		t.Fatalf("the request repeated after scoping: %d %s, want 200 with %s (stored once)", r.code, r.raw, id)
	}
	if r := scoped.do("POST", "/v1/messages", order(`{"total":8}`), bearerOf(ordersB)...); r.code != 202 || strings.Contains(r.raw, id) {
		t.Errorf("other work under the key after scoping: %d %s, want 202 of its own", r.code, r.raw)
	}
	if r := scoped.do("POST", "/v1/messages", order(`{"total":7}`), bearerOf(ordersA)...); r.code != 200 || r.body["id"] != id {
		t.Errorf("a second repeat: %d %s, want 200 with %s", r.code, r.raw, id)
	}
	if r := open.do("GET", "/v1/admin/queues/orders/keys/m-7", "", "Authorization", "Bearer "+open.token); r.code != 200 || r.body["depth"] != float64(2) {
		t.Errorf("key m-7: %d %s, want depth 2 (the first message, stored once, and the other work)", r.code, r.raw)
	}
}
