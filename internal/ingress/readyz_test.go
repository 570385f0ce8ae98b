package ingress_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/ingress"
)

// TestReadyzNamesTheBackendNotItsError: /readyz is open to anyone who reaches the port; it
// says which backend is down, never the backend's error text (addresses, users, versions).
func TestReadyzNamesTheBackendNotItsError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{&httpx.BackendDown{Backend: "Redis", Err: errors.New("dial tcp 10.9.8.7:6379: WRONGPASS invalid username-password pair for user sluice-prod")}, "Redis is not reachable"},
		{&httpx.BackendDown{Backend: "NATS", Err: errors.New("not connected to nats://10.9.8.7:4222 (server v2.15.2)")}, "NATS is not reachable"},
		{errors.New("something at 10.9.8.7 failed"), "a dependency is not reachable"},
	} {
		srv := httptest.NewServer(ingress.NewServer(ingress.ServerConfig{Ready: func(context.Context) error { return c.err }}))
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(body), c.want) {
			t.Errorf("%v: %d %s, want 503 saying %q", c.err, resp.StatusCode, body, c.want)
		}
		for _, leak := range []string{"10.9.8.7", "sluice-prod", "v2.15.2", "WRONGPASS"} {
			if strings.Contains(string(body), leak) {
				t.Errorf("/readyz shows %q: %s", leak, body)
			}
		}
	}
}

// TestAdminAPIWithoutTokensAnswers401: as docs/http-api.md says, with no admin token
// configured no token is known, so the admin API answers 401 (not 404) to every call;
// 404 "not enabled" is for a known token on a server without the admin API.
func TestAdminAPIWithoutTokensAnswers401(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(ingress.NewServer(ingress.ServerConfig{Admin: http.NotFoundHandler()}))
	defer srv.Close()
	for _, tok := range []string{"", "any-token-0123456789abc"} {
		if a := call(t, "GET", srv.URL+"/v1/admin/queues", tok, ""); a.status != 401 {
			t.Errorf("token %q: %d, want 401", tok, a.status)
		}
	}
}
