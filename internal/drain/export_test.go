package drain

import (
	"testing"
	"time"
)

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
func InstallSignals(d *Drainer) { d.sig = &testSignals{changed: make(chan struct{})} }

// SignalsOf is what InstallSignals gave d (nil: none).
func SignalsOf(d *Drainer) *TestSignals { return d.sig }

// Count is how many times ev was raised so far.
func (s *testSignals) Count(ev testEvent) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[ev]
}

// Wait returns once ev was raised n times in all (count from a Count taken before), and
// fails the test if it was not within the given time (a bound for a failing test only).
func (s *testSignals) Wait(t testing.TB, within time.Duration, ev testEvent, n int) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got, changed := s.n[ev], s.changed
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("not within %s: signal %d raised %d times (got %d)", within, ev, n, got)
		}
	}
}
