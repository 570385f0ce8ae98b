package process_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-io/sluice/internal/process"
)

// TestWaitForStop: the soft stop runs once ctx ends; a stop that outlasts its timeout
// (plus a grace of 5 s) is abandoned with an error that names -shutdown-timeout, so the
// binary exits 1 instead of hanging (virtual time: nothing sleeps).
func TestWaitForStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stopped := false
		done := make(chan error)
		go func() {
			done <- process.WaitForStop(ctx, slog.New(slog.DiscardHandler), "x", 2*time.Second, func() { stopped = true })
		}()
		synctest.Wait()
		if stopped {
			t.Fatal("stopped before the signal")
		}
		cancel()
		if err := <-done; err != nil || !stopped {
			t.Fatalf("soft stop: %v, stopped %v", err, stopped)
		}

		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		release := make(chan struct{})
		start := time.Now()
		err := process.WaitForStop(ctx, slog.New(slog.DiscardHandler), "x", 2*time.Second, func() { <-release })
		if err == nil || !strings.Contains(err.Error(), "-shutdown-timeout 2s") {
			t.Errorf("a stop that hangs: %v, want an error naming -shutdown-timeout", err)
		}
		if took := time.Since(start); took != 7*time.Second {
			t.Errorf("gave up after %s, want the timeout + 5s", took)
		}
		close(release)
	})
}
