package ingress_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// A path with an empty, "." or ".." segment is answered (400 problem+json), not redirected
// to the cleaned path as ServeMux does: that is another resource than the one named. A
// key that is "." or ".." is sent percent-encoded and reaches its handler.
func TestUncleanPathIsProblem(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{
		"/v1/admin/queues/orders/keys/..",
		"/v1/admin/queues/orders/keys/.",
		"/v1/admin/queues/orders//keys/m-1",
		"/v1/messages/../check",
		"/v1//check",
	} {
		req, err := http.NewRequest("GET", e.base+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = p // sent as written
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body map[string]any
		json.Unmarshal(raw, &body)
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.HasSuffix(body["type"].(string), "#invalid-request") {
			t.Errorf("GET %s: %d %s %s", p, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
		}
	}
	for _, key := range []string{"%2E%2E", "%2E", ".well-known"} {
		if r := e.admin("GET", "/v1/admin/queues/orders/keys/"+key, ""); r.code != 200 || r.body["depth"] != float64(0) {
			t.Errorf("key %s: %d %s", key, r.code, r.raw)
		}
	}
	if r := e.do("GET", "/ui", ""); r.code != 200 { // the console's /ui → /ui/ redirect is kept
		t.Errorf("GET /ui: %d", r.code)
	}
}

// A bad percent-escape in the request target is refused by net/http's server before any
// handler runs (400 text/plain, "malformed"): sluice cannot answer it with a problem. This
// test records that, so a change of it is noticed.
func TestBadEscapeIsRefusedBeforeHandlers(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/admin/queues/orders/keys/%ZZ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+e.token+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	t.Logf("%d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
}
