package testsignal_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testsignal"
)

func TestWaitReturnsOnceRaisedEnoughTimes(t *testing.T) {
	c := testsignal.New[string]()
	go func() {
		for range 3 {
			c.Raise("tick")
		}
	}()
	c.Wait(t, 10*time.Second, "tick", 3)
	if got := c.Count("tick"); got != 3 {
		t.Errorf("Count = %d, want 3", got)
	}
	if got := c.Count("other"); got != 0 {
		t.Errorf("Count of a kind never raised = %d", got)
	}
	var nilCounter *testsignal.Counter[string]
	nilCounter.Raise("tick") // production code raises through a nil pointer
}

type fatal struct{ msg string }

func (f *fatal) Helper()                        {}
func (f *fatal) Fatalf(format string, _ ...any) { f.msg = format }

func TestWaitFailsWhenNotRaisedInTime(t *testing.T) {
	c := testsignal.New[int]()
	c.Raise(1)
	f := &fatal{}
	c.Wait(f, 20*time.Millisecond, 1, 2)
	if f.msg == "" {
		t.Error("Wait returned without failing though the signal was raised once of twice")
	}
}
