package drain

import (
	"testing"
	"testing/synctest"
	"time"
)

// A Redis or NATS outage logs one line per 30 s, not one per failed claim.
func TestThrottleLetsOneLinePerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle{every: 30 * time.Second}
		for _, step := range []struct {
			after time.Duration // since the previous step
			want  bool
		}{
			{0, true}, // the first line
			{0, false},
			{29*time.Second + 999*time.Millisecond, false},
			{time.Millisecond, true}, // 30 s after the first
			{10 * time.Second, false},
			{time.Hour, true},
		} {
			time.Sleep(step.after) // the scenario, in the bubble's virtual time
			if got := th.allow(); got != step.want {
				t.Fatalf("allow() %s after the previous = %v, want %v", step.after, got, step.want)
			}
		}
	})
}
