package ingress

import (
	"crypto/x509"
	"fmt"

	"github.com/sluice-io/sluice/internal/decide"
	"github.com/sluice-io/sluice/internal/tlsx"
)

// checkCallers are the check API's callers (decide.Callers) once -submit-tokens is set: a
// token of scope check (check:DOMAIN for one domain) from that file, or a verified client
// certificate whose identity -check-client-names lists (an Envoy or Istio sidecar's).
type checkCallers struct {
	auth  *Auth
	names []string
}

// checkCallersOf is cfg's check callers; nil (checks open) without submit tokens.
func checkCallersOf(cfg ServerConfig) decide.Callers {
	if cfg.Auth == nil || cfg.Auth.Submit == nil {
		return nil
	}
	return &checkCallers{auth: cfg.Auth, names: cfg.CheckClientNames}
}

func (c *checkCallers) CheckCaller(secret string, sent bool, cert *x509.Certificate) (domain string, denied *decide.Denied) {
	if sent {
		t, ok := match(secret, c.auth.Submit.Tokens())
		if !ok {
			return "", &decide.Denied{Unauthenticated: true, Detail: "unknown check token"}
		}
		if t.Scope != ScopeCheck {
			return "", &decide.Denied{Detail: fmt.Sprintf("token %q has scope %s; checking needs scope check", t.Name, t.Scope)}
		}
		return t.Domain, nil
	}
	if cert != nil && tlsx.NameAllowed(cert, c.names) {
		return "", nil
	}
	detail := "checking needs Authorization: Bearer <a check token>"
	if len(c.names) > 0 {
		detail += " or a client certificate named in -check-client-names"
	}
	return "", &decide.Denied{Unauthenticated: true, Detail: detail}
}
