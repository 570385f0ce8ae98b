package overrides

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// script is a fake watch: call n (from 1) answers step(n); the test reads when each call
// came, in virtual time.
type script struct {
	start time.Time
	step  func(ctx context.Context, n int) (synced bool, err error)

	mu    sync.Mutex
	calls []time.Duration // since start
}

func (s *script) watch(ctx context.Context) (bool, error) {
	s.mu.Lock()
	s.calls = append(s.calls, time.Since(s.start))
	n := len(s.calls)
	s.mu.Unlock()
	return s.step(ctx, n)
}

func (s *script) times() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.calls...)
}

func newRewatcher(logs *bytes.Buffer) *Watcher {
	return &Watcher{store: &Store{cfg: Config{Bucket: "b"}}, cfg: WatcherConfig{
		Backoff: 100 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
	}.WithDefaults()}
}

var errDown = errors.New("nats: no responders")

// A failing watch is retried after 100 ms, 200 ms, 400 ms, … up to 5 s; a watch that read
// the whole bucket starts the backoff over; a deliberate re-watch (no error) comes at once;
// the failure log is throttled to one line per 10 s.
func TestRewatchBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var logs bytes.Buffer
		w := newRewatcher(&logs)
		blocked := make(chan struct{})
		s := &script{start: time.Now(), step: func(ctx context.Context, n int) (bool, error) {
			switch {
			case n <= 8:
				return false, errDown
			case n == 9:
				return true, nil // synced, then a deliberate re-watch (resync)
			case n == 10:
				return false, errDown
			case n == 11:
				return true, errDown // synced, then lost the connection
			default:
				close(blocked)
				<-ctx.Done()
				return false, ctx.Err()
			}
		}}
		done := make(chan struct{})
		go func() { w.rewatch(ctx, s.watch); close(done) }()
		<-blocked

		ms := time.Millisecond
		want := []time.Duration{
			0, 100 * ms, 300 * ms, 700 * ms, 1500 * ms, 3100 * ms, 6300 * ms, // doubling
			11300 * ms, 16300 * ms, // capped at 5 s
			16300 * ms, // after the resync: at once
			16400 * ms, // after a synced watch: the backoff starts over
			16500 * ms, // again 100 ms: synced before it failed
		}
		got := s.times()
		if len(got) != len(want) {
			t.Fatalf("watch called at %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("watch called at %v, want %v", got, want)
			}
		}
		// Failures at 0 s (logged), 0.1–6.3 s (muted), 11.3 s (logged), 16.3 and 16.4 s (muted).
		if n := strings.Count(logs.String(), "overrides watch failed"); n != 2 {
			t.Errorf("%d failure lines in 16.5 s, want 2 (one per 10 s):\n%s", n, logs.String())
		}

		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("rewatch still running after its context ended")
		}
	})
}

// Cancelling the context during a backoff ends rewatch at once, not after the backoff.
func TestRewatchStopsDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		w := newRewatcher(&bytes.Buffer{})
		w.cfg.Backoff = time.Hour
		s := &script{start: time.Now(), step: func(context.Context, int) (bool, error) { return false, errDown }}
		done := make(chan struct{})
		go func() { w.rewatch(ctx, s.watch); close(done) }()
		synctest.Wait() // the first watch failed; rewatch waits out its backoff
		start := time.Now()
		cancel()
		<-done
		if took := time.Since(start); took != 0 {
			t.Errorf("rewatch returned %s after the cancel, want at once", took)
		}
		if n := len(s.times()); n != 1 {
			t.Errorf("%d watch calls, want 1", n)
		}
	})
}
