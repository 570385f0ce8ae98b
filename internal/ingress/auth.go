package ingress

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/sluice-io/sluice/internal/httpx"
)

// authorized reports whether r carries the admin bearer token. The comparison is
// constant-time over SHA-256 digests, so neither the token's content nor its length leaks
// through timing. An empty configured token authorizes nobody.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.AdminToken == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(s.cfg.AdminToken))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (s *Server) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnauthorized, Status: http.StatusUnauthorized,
		Detail: "the admin API needs Authorization: Bearer <SLUICE_ADMIN_TOKEN>"})
}

func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.unauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}
