package process_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
)

// TestLimitsRedisTimeoutFlags: -limits-redis-timeout and -limits-probe-every reach the
// limiter that admission and checks decide with. A private Redis is paused (CLIENT PAUSE,
// so every command waits for it): a stack told 30ms gives up on it and decides locally
// (degraded mode); one told 5s waits for Redis's answer and stays out of degraded mode.
// With -limits-probe-every 1h, the degraded stack does not try Redis again a second
// later (the old fixed 1s would), only once the hour has passed. (Both were fixed, at
// 100ms and 1s: a loaded machine pushed the envoy parity tests into degraded mode.)
func TestLimitsRedisTimeoutFlags(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	rs := redistest.Start(t, redistest.Options{}) // private: it is paused
	open := func(redisURL string, args ...string) (*process.Stack, <-chan bool) {
		t.Helper()
		var s process.Settings
		f := process.NewFlagSet("test", func(string) string { return "" }, io.Discard)
		s.Declare(f, process.RoleIngress)
		if err := f.Parse(append([]string{"-nats", node.URL(), "-redis", redisURL}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(process.RoleIngress, false); err != nil {
			t.Fatal(err)
		}
		sc := s.StackConfig("test")
		sc.Rules, sc.Logger = func() *rules.Set { return &rules.Set{} }, slog.New(slog.DiscardHandler)
		changes := make(chan bool, 4)
		sc.OnDegraded = func(on bool) { changes <- on }
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := process.Open(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st, changes
	}
	short, shortChanges := open(rs.URL(), "-limits-redis-timeout", "30ms", "-limits-probe-every", "1h")
	// The client's own read timeout (500ms unless the URL says) bounds a wait too: raised
	// here so that the paused Redis, not the client, decides how long the call takes.
	long, longChanges := open(rs.URL()+"?read_timeout=10s", "-limits-redis-timeout", "5s")

	limits := []bucket.Limit{{Rate: 5, Interval: time.Minute}}
	allow := func(st *process.Stack, key string, now time.Time) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		r, err := st.Limits.Allow(ctx, key, limits, 1, now)
		if err != nil || !r.Allowed {
			t.Fatalf("%s: allowed %v, %v", key, r.Allowed, err)
		}
		return time.Since(start)
	}
	now := time.Now()
	allow(short, "warm", now) // both connected and answered by Redis before the pause
	allow(long, "warm", now)

	const pause = 300 * time.Millisecond
	if err := rs.Client(t).Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	took := allow(short, "a", now)
	select {
	case on := <-shortChanges:
		if !on || !short.Degraded.InDegradedMode() {
			t.Fatalf("short timeout: told degraded=%v, want true", on)
		}
	default:
		t.Fatalf("short timeout: answered after %v and not in degraded mode", took)
	}
	took = allow(long, "a", now) // returns when the pause ends
	if long.Degraded.InDegradedMode() || len(longChanges) > 0 {
		t.Fatalf("5s timeout: degraded after a %v wait for a paused Redis", took)
	}
	t.Logf("30ms timeout: degraded; 5s timeout: answered by Redis after %v (paused %v)", took, pause)

	// Redis answers again (the long stack's call got through). A second later the short
	// stack is still degraded: its next probe is an hour away.
	allow(short, "b", now.Add(time.Second))
	if !short.Degraded.InDegradedMode() || len(shortChanges) > 0 {
		t.Fatal("-limits-probe-every 1h: Redis was tried again after 1s")
	}
	allow(short, "b", now.Add(time.Hour+time.Second))
	select {
	case on := <-shortChanges:
		if on {
			t.Fatal("after the probe interval: told degraded=true, want false")
		}
	default:
		t.Fatal("after the probe interval: Redis not tried again, still degraded")
	}
}

// TestLimitsFlagsValidated: both want a positive duration; the error names the flag.
func TestLimitsFlagsValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ flag, value string }{
		{"-limits-redis-timeout", "0s"}, {"-limits-redis-timeout", "-1ms"},
		{"-limits-probe-every", "0s"}, {"-limits-probe-every", "-5s"},
	} {
		var s process.Settings
		f := process.NewFlagSet("test", func(string) string { return "" }, io.Discard)
		s.Declare(f, process.RoleDrainer)
		if err := f.Parse([]string{c.flag, c.value}); err != nil {
			t.Fatal(err)
		}
		err := s.Validate(process.RoleDrainer, false)
		if err == nil || !strings.HasPrefix(err.Error(), c.flag+": want a positive duration") {
			t.Errorf("%s %s: error %v, want one naming the flag", c.flag, c.value, err)
		}
	}
	// The environment variables set them too.
	var s process.Settings
	env := map[string]string{"SLUICE_LIMITS_REDIS_TIMEOUT": "250ms", "SLUICE_LIMITS_PROBE_EVERY": "3s"}
	f := process.NewFlagSet("test", func(k string) string { return env[k] }, io.Discard)
	s.Declare(f, process.RoleIngress)
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if sc := s.StackConfig("x"); sc.LimitsRedisTimeout != 250*time.Millisecond || sc.LimitsProbeEvery != 3*time.Second {
		t.Errorf("from the environment: %v, %v", sc.LimitsRedisTimeout, sc.LimitsProbeEvery)
	}
}
