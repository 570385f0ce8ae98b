package drain

import "github.com/sluice-io/sluice/internal/testsignal"

// DropNotices makes d's own engine ignore the NATS notices of new messages, as if every one
// were lost: only the repair listing finds new keys.
func DropNotices(d *Drainer, drop bool) { d.dropNotices.Store(drop) }

// Signal points a test can wait on (testsignals.go).
const (
	RenewSent   = evRenewSent   // a lease renewal is about to be sent
	Renewed     = evRenewed     // a renewal's answer (or error) was acted on
	ClaimFailed = evClaimFailed // a claim or reservation failed on Redis
	RulesPolled = evRulesPolled // the rules manager read the rules
)

// TestSignals are one drainer's signal points, as a test sees them.
type TestSignals = testSignals

// InstallSignals gives d its test signals; call it before Start.
func InstallSignals(d *Drainer) { d.sig = testsignal.New[testEvent]() }

// SignalsOf is what InstallSignals gave d (nil: none).
func SignalsOf(d *Drainer) *TestSignals { return d.sig }
