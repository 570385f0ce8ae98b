package drain

// Test signals: points in the drain loops a test waits on instead of sleeping ("at least
// one renewal", "several failed claims", "several rules polls"). A Drainer carries them
// only when a test installed them (export_test.go, before Start); in production d.sig is
// nil and raising one is a nil check.

import "github.com/sluice-io/sluice/internal/testsignal"

// testEvent is one kind of signal point.
type testEvent int

const (
	evRenewSent   testEvent = iota // a lease renewal is about to be sent (own engine: every rule's in one call)
	evRenewed                      // a renewal's answer (or its error) was acted on
	evClaimFailed                  // a claim or a reservation failed on Redis (redisFailed)
	evRulesPolled                  // the rules manager read Config.Rules and acted on them
)

// testSignals are a drainer's signal points (nil in production: Raise is then a nil check).
type testSignals = testsignal.Counter[testEvent]
