// Package waittest is how a test waits for something it cannot be told about: it polls a
// condition until it holds or a deadline passes. The deadline only bounds a failing test
// (a loaded CI machine is slow, never wrong), so make it generous; a passing test waits
// only as long as the condition takes.
//
// Prefer a signal when the test can observe the event (a channel the code under test
// closes, a hook that sends): waiting on it is exact and needs no deadline guess. Poll
// with this package when the outcome is a state elsewhere (a Redis key, a stream's
// length, a count in a recording sink). A time.Sleep in a test is right only when the
// elapsing time is the scenario itself ("the load runs for 5 s").
//
// Inside a testing/synctest bubble the polling runs in virtual time, like everything else.
//
// This package is for tests only; production code never imports it.
package waittest

import (
	"runtime"
	"testing"
	"time"
)

// The interval between two looks at the condition starts short, so a condition that
// holds almost at once costs almost nothing, and doubles up to maxInterval, so a long
// wait does not spin (a condition may copy a recording sink or ask a server).
const (
	firstInterval = time.Millisecond
	maxInterval   = 50 * time.Millisecond
)

// Eventually waits until cond holds and fails the test (naming what it waited for) if it
// does not within the given time. cond runs in the calling goroutine, so it may use t.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}

// Within waits until cond holds and reports whether it did within the given time; for a
// test that reports a miss itself (a fault scenario that records a failed row).
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	interval := firstInterval
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(interval, left))
		interval = min(2*interval, maxInterval)
	}
	return true
}

// NextMillisecond returns once the wall clock has moved on to its next millisecond: for a
// test whose next step must be stamped later than the last (a record's millisecond
// UpdatedAt), without guessing a sleep. It spins for under a millisecond.
func NextMillisecond() {
	for ms := time.Now().UnixMilli(); time.Now().UnixMilli() == ms; {
		runtime.Gosched()
	}
}
