package ingress

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/tlsx"
)

// The check API (POST /v1/check, POST /json, the envoy RLS over gRPC) is open until
// -submit-tokens is set; from then on a caller needs a token of scope check (check:DOMAIN
// for one domain) from that file — over gRPC as `authorization: Bearer …` metadata, the
// way Envoy's grpc_service initial_metadata sends it — or a verified client certificate
// whose identity -check-client-names lists (an Envoy or Istio sidecar's). Without this a
// caller could spend or probe any tenant's limits.

// checkDenied is why a check caller was refused: unauthenticated (no or an unknown
// credential: 401, Unauthenticated) or forbidden (a credential of another scope or
// domain: 403, PermissionDenied).
type checkDenied struct {
	unauthenticated bool
	detail          string
}

// checksOpen reports whether the check API needs no credential (no -submit-tokens).
func (s *Server) checksOpen() bool { return s.cfg.Auth == nil || s.cfg.Auth.Submit == nil }

// checkCaller decides who is calling the check API from a bearer secret (sent: one was
// given) and a verified client certificate (nil without). domain is the one domain the
// caller may check ("" = any).
func (s *Server) checkCaller(secret string, sent bool, cert *x509.Certificate) (domain string, denied *checkDenied) {
	if s.checksOpen() {
		return "", nil
	}
	if sent {
		t, ok := match(secret, s.cfg.Auth.Submit.Tokens())
		if !ok {
			return "", &checkDenied{unauthenticated: true, detail: "unknown check token"}
		}
		if t.Scope != ScopeCheck {
			return "", &checkDenied{detail: fmt.Sprintf("token %q has scope %s; checking needs scope check", t.Name, t.Scope)}
		}
		return t.Domain, nil
	}
	if cert != nil && tlsx.NameAllowed(cert, s.cfg.CheckClientNames) {
		return "", nil
	}
	detail := "checking needs Authorization: Bearer <a check token>"
	if len(s.cfg.CheckClientNames) > 0 {
		detail += " or a client certificate named in -check-client-names"
	}
	return "", &checkDenied{unauthenticated: true, detail: detail}
}

// checkDomain refuses a caller limited to one domain that asks about another.
func checkDomain(allowed, domain string) *checkDenied {
	if allowed == "" || allowed == domain {
		return nil
	}
	return &checkDenied{detail: fmt.Sprintf("this token may check domain %q only", allowed)}
}

// httpCheckCaller is checkCaller for an HTTP request; false when it answered the refusal.
func (s *Server) httpCheckCaller(w http.ResponseWriter, r *http.Request) (domain string, ok bool) {
	if s.checksOpen() {
		return "", true
	}
	secret, sent := bearer(r)
	var cert *x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert = r.TLS.PeerCertificates[0]
	}
	domain, d := s.checkCaller(secret, sent, cert)
	if d != nil {
		s.writeCheckDenied(w, r, d)
		return "", false
	}
	return domain, true
}

// reason is d's label of sluice_checks_refused_total.
func (d *checkDenied) reason() string {
	if d.unauthenticated {
		return "unauthenticated"
	}
	return "forbidden"
}

func (s *Server) writeCheckDenied(w http.ResponseWriter, r *http.Request, d *checkDenied) {
	s.metrics.checkRefused.WithLabelValues(d.reason(), transportHTTP).Inc()
	if d.unauthenticated {
		s.unauthorized(w, r, d.detail)
		return
	}
	forbidden(w, d.detail)
}

// grpcCheckCaller is checkCaller for a gRPC call: the `authorization` metadata and the
// connection's verified client certificate.
func (s *Server) grpcCheckCaller(ctx context.Context) (domain string, err error) {
	if s.checksOpen() {
		return "", nil
	}
	var secret string
	sent := false
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			scheme, got, found := strings.Cut(v[0], " ")
			got = strings.TrimLeft(got, " ")
			secret, sent = got, found && strings.EqualFold(scheme, "Bearer") && got != ""
			if !sent {
				return "", s.grpcDenied(&checkDenied{unauthenticated: true, detail: "authorization metadata: want \"Bearer <a check token>\""})
			}
		}
	}
	var cert *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			cert = ti.State.PeerCertificates[0]
		}
	}
	domain, d := s.checkCaller(secret, sent, cert)
	return domain, s.grpcDenied(d)
}

func (s *Server) grpcDenied(d *checkDenied) error {
	if d != nil {
		s.metrics.checkRefused.WithLabelValues(d.reason(), transportGRPC).Inc()
	}
	switch {
	case d == nil:
		return nil
	case d.unauthenticated:
		return status.Error(codes.Unauthenticated, d.detail)
	default:
		return status.Error(codes.PermissionDenied, d.detail)
	}
}
