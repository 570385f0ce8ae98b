package retry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The re-park backoff at fixed instants: 1 s doubling to 5 min without jitter under strict
// ordering, anywhere in [1 s, ceiling] when relaxed, and never before the queue's own
// suggestion.
func TestReparkAt(t *testing.T) {
	cfg := ReadmitterConfig{MinBackoff: time.Second, MaxBackoff: 5 * time.Minute}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		parks     int
		suggested time.Time
		want      time.Time
	}{
		{1, time.Time{}, now.Add(time.Second)},
		{2, time.Time{}, now.Add(2 * time.Second)},
		{3, time.Time{}, now.Add(4 * time.Second)},
		{9, time.Time{}, now.Add(256 * time.Second)},
		{10, time.Time{}, now.Add(5 * time.Minute)}, // 512 s, capped
		{64, time.Time{}, now.Add(5 * time.Minute)}, // no overflow
		{1, now.Add(time.Hour), now.Add(time.Hour)}, // the window resets in an hour
		{3, now.Add(time.Second), now.Add(4 * time.Second)},
	} {
		if got := cfg.reparkAt(now, tc.parks, true, tc.suggested); !got.Equal(tc.want) {
			t.Errorf("strict, park %d, suggested %v: %s after now, want %s", tc.parks, tc.suggested, got.Sub(now), tc.want.Sub(now))
		}
	}
	for _, tc := range []struct {
		parks   int
		ceiling time.Duration
	}{{1, time.Second}, {3, 4 * time.Second}, {12, 5 * time.Minute}} {
		for range 100 {
			if d := cfg.reparkAt(now, tc.parks, false, time.Time{}).Sub(now); d < time.Second || d > tc.ceiling {
				t.Fatalf("relaxed, park %d: %s, want within [1s, %s]", tc.parks, d, tc.ceiling)
			}
		}
	}
	if got := cfg.reparkAt(now, 3, false, now.Add(time.Hour)); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("relaxed with a later suggestion: %s after now, want 1h", got.Sub(now))
	}
}

// During a NATS outage every fired message fails: the re-admitter logs one line per second
// and says how many it left out.
func TestReadmitterErrorLogIsThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		r := &Readmitter{log: slog.New(slog.NewTextHandler(&logs, nil))}
		down := errors.New("nats: no responders")
		lines := func() []string { return strings.Split(strings.TrimSpace(logs.String()), "\n") }

		for range 3 {
			r.logError("fired message", down)
		}
		time.Sleep(999 * time.Millisecond) // the scenario, in the bubble's virtual time: just within the second
		r.logError("fired message", down)
		if n := len(lines()); n != 1 {
			t.Fatalf("%d lines within the first second, want 1:\n%s", n, logs.String())
		}
		time.Sleep(time.Millisecond) // the scenario, in virtual time: the second is over
		r.logError("fired message", down)
		got := lines()
		if len(got) != 2 || !strings.Contains(got[1], "suppressed=3") {
			t.Fatalf("after a second, want a second line counting the 3 left out:\n%s", logs.String())
		}
	})
}
