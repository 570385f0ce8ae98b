package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/console"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("GET "+console.Prefix, console.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, c := range []struct {
		path, status, ctype, body string
	}{
		{"/ui/", "200", "text/html", `<script src="app.js" defer></script>`},
		{"/ui/app.js", "200", "javascript", `sessionStorage`},
		{"/ui/app.css", "200", "text/css", `prefers-color-scheme: dark`},
		{"/ui/nothing.js", "404", "", ""},
	} {
		resp, err := http.Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Status[:3]; got != c.status || !strings.Contains(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(body), c.body) {
			t.Errorf("%s: %s %q, want %s %s containing %q", c.path, resp.Status, resp.Header.Get("Content-Type"), c.status, c.ctype, c.body)
		}
		if c.status == "200" {
			csp := resp.Header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("%s: Content-Security-Policy %q", c.path, csp)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("%s: security headers %v", c.path, resp.Header)
			}
		}
	}
	// The page has no inline script or style (the policy would block them) and loads
	// nothing from another origin.
	resp, _ := http.Get(srv.URL + "/ui/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bad := range []string{"<script>", "style=", "<style", "onclick", "http://", "https://"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
}
