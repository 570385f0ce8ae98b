package sink

import (
	"strings"
	"sync"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
)

// signers holds the signers of rules with their own sink.sign_keys, by key files.
type signers struct {
	m sync.Map // strings.Join(files, "\x00") → *sign.Signer
}

// signerFor is the signer of rule's deliveries: the rule's sink.sign_keys, else def (the
// drainer's -sign-keys), else nil (unsigned). A rule's key files that do not load are an
// error every time (not cached), so fixing the file is enough.
func (s *signers) signerFor(rule *rules.Rule, def *sign.Signer) (*sign.Signer, error) {
	if rule == nil || len(rule.Sink.SignKeys) == 0 {
		return def, nil
	}
	k := strings.Join(rule.Sink.SignKeys, "\x00")
	if v, ok := s.m.Load(k); ok {
		return v.(*sign.Signer), nil
	}
	sg, err := sign.Open("sink.sign_keys of rule "+rule.Name, rule.Sink.SignKeys, nil)
	if err != nil {
		return nil, err
	}
	v, _ := s.m.LoadOrStore(k, sg)
	return v.(*sign.Signer), nil
}
