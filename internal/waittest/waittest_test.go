package waittest_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-io/sluice/internal/waittest"
)

func TestWithinReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var ready atomic.Bool
		time.AfterFunc(300*time.Millisecond, func() { ready.Store(true) })
		if !waittest.Within(10*time.Second, ready.Load) {
			t.Fatal("Within = false for a condition that held after 300ms")
		}
		// Looks at 0, 1, 3, 7, 15, 31, 63, 113, 163, 213, 263, 313 ms: the first after 300 ms.
		if took := time.Since(start); took != 313*time.Millisecond {
			t.Errorf("Within returned after %s, want 313ms", took)
		}
	})
}

func TestWithinGivesUpAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		looks := 0
		if waittest.Within(time.Second, func() bool { looks++; return false }) {
			t.Fatal("Within = true for a condition that never holds")
		}
		if took := time.Since(start); took != time.Second {
			t.Errorf("Within gave up after %s, want exactly 1s", took)
		}
		// At 0, 1, 3, 7, 15, 31, 63 ms, then every 50 ms up to 963 ms, and at the deadline.
		if looks != 7+18+1 {
			t.Errorf("%d looks, want 26", looks)
		}
	})
}

func TestWithinHeldAtOnceDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !waittest.Within(0, func() bool { return true }) {
			t.Fatal("Within = false for a condition that holds")
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("Within waited %s for a condition that held at once", took)
		}
	})
}

// fakeT records Fatalf instead of stopping the test, to see Eventually fail.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
}

func TestEventuallyFailsTheTestOnTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeT{TB: t}
		waittest.Eventually(ft, time.Second, "never", func() bool { return false })
		if ft.failed == "" {
			t.Fatal("Eventually did not fail the test for a condition that never held")
		}
		ft = &fakeT{TB: t}
		waittest.Eventually(ft, time.Second, "always", func() bool { return true })
		if ft.failed != "" {
			t.Fatal("Eventually failed the test for a condition that held")
		}
	})
}

func TestNextMillisecondReturnsInALaterMillisecond(t *testing.T) {
	t.Parallel()
	for range 20 {
		before := time.Now().UnixMilli()
		waittest.NextMillisecond()
		if now := time.Now().UnixMilli(); now <= before {
			t.Fatalf("NextMillisecond returned in millisecond %d, not after %d", now, before)
		}
	}
}
