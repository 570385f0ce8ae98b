package decide

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

	"github.com/sluice-io/sluice/internal/httpx"
)

// The check API (POST /v1/check, POST /json, the envoy RLS over gRPC) is open until
// -submit-tokens is set; from then on a caller needs a token of scope check (check:DOMAIN
// for one domain) from that file — over gRPC as `authorization: Bearer …` metadata, the
// way Envoy's grpc_service initial_metadata sends it — or a verified client certificate
// whose identity -check-client-names lists (an Envoy or Istio sidecar's). Without this a
// caller could spend or probe any tenant's limits.

// checksOpen reports whether the check API needs no credential (no -submit-tokens).
func (s *Service) checksOpen() bool { return s.cfg.Callers == nil }

// checkCaller is cfg.Callers' decision.
func (s *Service) checkCaller(secret string, sent bool, cert *x509.Certificate) (domain string, denied *Denied) {
	if s.checksOpen() {
		return "", nil
	}
	return s.cfg.Callers.CheckCaller(secret, sent, cert)
}

// checkDomain refuses a caller limited to one domain that asks about another.
func checkDomain(allowed, domain string) *Denied {
	if allowed == "" || allowed == domain {
		return nil
	}
	return &Denied{Detail: fmt.Sprintf("this token may check domain %q only", allowed)}
}

// httpCheckCaller is checkCaller for an HTTP request; false when it answered the refusal.
func (s *Service) httpCheckCaller(w http.ResponseWriter, r *http.Request) (domain string, ok bool) {
	if s.checksOpen() {
		return "", true
	}
	secret, sent := httpx.Bearer(r)
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
func (d *Denied) reason() string {
	if d.Unauthenticated {
		return "unauthenticated"
	}
	return "forbidden"
}

func (s *Service) writeCheckDenied(w http.ResponseWriter, r *http.Request, d *Denied) {
	s.metrics.checkRefused.WithLabelValues(d.reason(), transportHTTP).Inc()
	if d.Unauthenticated {
		httpx.WriteUnauthorized(w, r, d.Detail)
		return
	}
	httpx.WriteProblem(w, httpx.Forbidden(d.Detail))
}

// grpcCheckCaller is checkCaller for a gRPC call: the `authorization` metadata and the
// connection's verified client certificate.
func (s *Service) grpcCheckCaller(ctx context.Context) (domain string, err error) {
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
				return "", s.grpcDenied(&Denied{Unauthenticated: true, Detail: "authorization metadata: want \"Bearer <a check token>\""})
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

func (s *Service) grpcDenied(d *Denied) error {
	if d != nil {
		s.metrics.checkRefused.WithLabelValues(d.reason(), transportGRPC).Inc()
	}
	switch {
	case d == nil:
		return nil
	case d.Unauthenticated:
		return status.Error(codes.Unauthenticated, d.Detail)
	default:
		return status.Error(codes.PermissionDenied, d.Detail)
	}
}
