// Package testsignal lets a test wait for a background loop to reach a point, instead of
// sleeping: the loop raises a signal there (a nil check when no test installed one) and
// the test waits until it has been raised n times.
//
// # Files
//
//   - testsignal.go: Counter, its Raise, Count and Wait
package testsignal

import (
	"sync"
	"time"
)

// TB is the part of testing.TB that Wait needs (so production code that carries a Counter
// does not import the testing package).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Counter counts the signals raised so far, by kind, and wakes the tests waiting on them.
// A nil *Counter ignores Raise: production code raises through a nil pointer.
type Counter[K comparable] struct {
	mu      sync.Mutex
	n       map[K]int
	changed chan struct{} // closed, and replaced, at every raise
}

// New returns a Counter with nothing raised.
func New[K comparable]() *Counter[K] {
	return &Counter[K]{n: map[K]int{}, changed: make(chan struct{})}
}

// Raise records one signal of kind k; nothing on a nil Counter.
func (c *Counter[K]) Raise(k K) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.n[k]++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// Count is how many signals of kind k were raised so far.
func (c *Counter[K]) Count(k K) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// Wait returns once k was raised n times in all (count from a Count taken before), and
// fails the test if it was not within the given time (a bound for a failing test only).
func (c *Counter[K]) Wait(t TB, within time.Duration, k K, n int) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got, changed := c.n[k], c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("not within %s: signal %v raised %d times (got %d)", within, k, n, got)
			return
		}
	}
}
