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

// signerFor is the signer of rule's deliveries: the rule's sink.sign_keys, else def (the
// drainer's -sign-keys), else nil (unsigned). A rule's key files that do not load are an
// error every time (not cached), so fixing the file is enough.
func (s *signers) signerFor(rule *rules.Rule, def *sign.Signer) (*sign.Signer, error) {
	if rule == nil || rule.Sink.SignKeys == "" {
		return def, nil
	}
	k := rule.Sink.SignKeys
	if v, ok := s.m.Load(k); ok {
		return v.(*sign.Signer), nil
	}
	sg, err := sign.Open("sink.sign_keys of rule "+rule.Name, rule.Sink.SignKeyFiles(), nil)
	if err != nil {
		return nil, err
	}
	v, _ := s.m.LoadOrStore(k, sg)
	return v.(*sign.Signer), nil
}
