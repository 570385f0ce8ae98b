package sink

import (
	"sync"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
)

// signers holds the signers of rules with their own sink.sign_keys, by key files.
type signers struct {
	m sync.Map // rules.Sink.SignKeys (files, comma-separated) → *sign.Signer
}

// signerFor is the signer of rule's deliveries — the rule's sink.sign_keys, else def (the
// drainer's -sign-keys), else nil (unsigned) — and the scheme laying out its headers: the
// rule's sink.sign_scheme, else scheme (the drainer's -sign-scheme). A rule's key files that
// do not load are an error every time (not cached), so fixing the file is enough.
func (s *signers) signerFor(rule *rules.Rule, def *sign.Signer, scheme sign.Scheme) (*sign.Signer, sign.Scheme, error) {
	if rule != nil && rule.Sink.SignScheme != "" {
		scheme = sign.Scheme(rule.Sink.SignScheme) // validated by the rules parser
	}
	if rule == nil || rule.Sink.SignKeys == "" {
		return def, scheme, nil
	}
	k := rule.Sink.SignKeys
	if v, ok := s.m.Load(k); ok {
		return v.(*sign.Signer), scheme, nil
	}
	sg, err := sign.Open("sink.sign_keys of rule "+rule.Name, rule.Sink.SignKeyFiles(), nil)
	if err != nil {
		return nil, scheme, err
	}
	v, _ := s.m.LoadOrStore(k, sg)
	return v.(*sign.Signer), scheme, nil
}
