package bucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bucket"
)

// downStore is a primary that is always unreachable.
type downStore struct{ calls int }

func (d *downStore) Allow(context.Context, string, []bucket.Limit, int64, time.Time) (bucket.Result, error) {
	d.calls++
	return bucket.Result{}, errors.New("dial tcp: connection refused")
}

// TestDegradedLocalQuota: while the primary is down, each process gets the limit
// divided by the live processes (rounded up), and the primary is probed once per
// ProbeInterval of the callers' time, not on every call.
func TestDegradedLocalQuota(t *testing.T) {
	t.Parallel()
	primary := &downStore{}
	d := bucket.NewDegraded(primary, bucket.DegradedConfig{Processes: 4, ProbeInterval: time.Minute})
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Rate: 10, Interval: time.Hour},
		{Algorithm: bucket.SlidingWindowLog, Rate: 1000, Interval: time.Hour},
	}
	count := func(key string, at time.Time) (allowed int) {
		for i := 0; i < 20; i++ {
			r, err := d.Allow(context.Background(), key, limits, 1, at)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				allowed++
			}
		}
		return allowed
	}
	if got := count("a", t0); got != 3 { // ⌈10/4⌉
		t.Fatalf("4 processes: allowed %d, want 3", got)
	}
	d.SetProcesses(1)
	if got := count("b", t0); got != 10 {
		t.Fatalf("1 process: allowed %d, want 10", got)
	}
	if primary.calls != 1 || !d.InDegradedMode() {
		t.Fatalf("primary called %d times within one probe interval, want 1", primary.calls)
	}
	count("c", t0.Add(time.Minute))
	if primary.calls != 2 {
		t.Fatalf("primary called %d times after the probe interval, want 2", primary.calls)
	}
}
