package bucket

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DegradedConfig configures a Degraded store. The zero value is ready to use.
type DegradedConfig struct {
	// Processes is the number of live ingress processes sharing the limits. While
	// degraded, each process enforces every limit's Rate and Burst divided by it,
	// rounded up (at least 1), so the processes together stay near the global limit
	// ("local quota, global counter"). Default 1. Change it at run time with
	// SetProcesses as processes come and go.
	Processes int
	// Timeout bounds each call to the primary store. It only bounds socket I/O when the
	// go-redis client has ContextTimeoutEnabled (or Read/Write/DialTimeout no longer
	// than this); configure the client so. Default 100ms.
	Timeout time.Duration
	// ProbeInterval is how often, while degraded, one call tries the primary again
	// (measured in the now passed to Allow). Other calls go straight to the fallback,
	// so a dead Redis costs one timeout per interval, not one per request. Default 1s.
	ProbeInterval time.Duration
	// OnChange is called when the store enters degraded mode (degraded true, err the
	// failure) or leaves it (false, nil), from the Allow call that noticed. Use it for
	// a metric and a log line. It must not block. Optional.
	OnChange func(degraded bool, err error)
	// Memory configures the local fallback store.
	Memory MemoryConfig
}

// WithDefaults returns c with every zero field set to its default.
func (c DegradedConfig) WithDefaults() DegradedConfig {
	if c.Processes <= 0 {
		c.Processes = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = 100 * time.Millisecond
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Second
	}
	return c
}

// Degraded is a Store that decides with a primary store (Redis) and, while the primary
// fails, with a local Memory store whose limits are divided by the number of live
// processes. A caller whose context has a deadline nearer than Timeout (an envoy RLS
// call) gets an answer within it: when the primary cannot answer in time, that call is
// decided locally, without entering degraded mode. Errors about the caller's input (ErrInvalid) and the caller's own context
// ending are returned, not treated as an outage. Safe for concurrent use.
//
// The local state starts empty when an outage begins and is not copied back when it
// ends, so around each transition a key may get up to one extra local quota.
type Degraded struct {
	primary   Store
	local     *Memory
	timeout   time.Duration
	probe     int64 // ns
	onChange  func(bool, error)
	processes atomic.Int64
	degraded  atomic.Bool
	nextProbe atomic.Int64 // unix ns in the callers' time
}

// NewDegraded wraps primary (typically a *Redis) configured by cfg.
func NewDegraded(primary Store, cfg DegradedConfig) *Degraded {
	cfg = cfg.WithDefaults()
	d := &Degraded{
		primary:  primary,
		local:    NewMemory(cfg.Memory),
		timeout:  cfg.Timeout,
		probe:    int64(cfg.ProbeInterval),
		onChange: cfg.OnChange,
	}
	d.processes.Store(int64(cfg.Processes))
	return d
}

// SetProcesses sets the number of live processes that share the limits (values below 1
// count as 1). It applies to the next decision.
func (d *Degraded) SetProcesses(n int) {
	d.processes.Store(max(1, int64(n)))
}

// InDegradedMode reports whether decisions are currently made locally.
func (d *Degraded) InDegradedMode() bool { return d.degraded.Load() }

// Allow implements Store.
func (d *Degraded) Allow(ctx context.Context, key string, limits []Limit, n int64, now time.Time) (Result, error) {
	if len(limits) > MaxLimits {
		return Result{}, ErrTooManyLimits
	}
	t := now.UnixNano()
	if !d.degraded.Load() || d.claimProbe(t) {
		// The primary gets Timeout, or less when the caller's deadline is nearer: enough
		// of it is kept back (callerReserve) to decide locally and still answer in time.
		budget, callerBound := d.timeout, false
		if dl, ok := ctx.Deadline(); ok {
			rem := time.Until(dl)
			if b := rem - callerReserve(rem); b < budget {
				budget, callerBound = b, true
			}
		}
		var r Result
		err, expired := error(context.DeadlineExceeded), true
		if budget > 0 {
			pctx, cancel := context.WithTimeout(ctx, budget)
			r, err = d.primary.Allow(pctx, key, limits, n, now)
			expired = pctx.Err() != nil // however the client reports it (a context error, an I/O timeout)
			cancel()
		}
		switch {
		case err == nil:
			if d.degraded.CompareAndSwap(true, false) && d.onChange != nil {
				d.onChange(false, nil)
			}
			return r, nil
		case errors.Is(err, ErrInvalid) || ctx.Err() != nil:
			return r, err
		case callerBound && expired:
			// Slower than this caller can wait, which says nothing of an outage: this
			// one call is decided locally, the mode does not change.
			return d.allowLocal(ctx, key, limits, n, now)
		}
		d.nextProbe.Store(t + d.probe)
		if d.degraded.CompareAndSwap(false, true) && d.onChange != nil {
			d.onChange(true, fmt.Errorf("bucket: degraded to local limits: %w", err))
		}
	}
	return d.allowLocal(ctx, key, limits, n, now)
}

// callerReserve is the part of a caller's remaining time kept back from the primary
// store to decide locally and answer: a quarter, between 1ms and 10ms.
func callerReserve(rem time.Duration) time.Duration {
	return min(max(rem/4, time.Millisecond), 10*time.Millisecond)
}

// allowLocal decides with the local store, each limit divided by the live processes.
func (d *Degraded) allowLocal(ctx context.Context, key string, limits []Limit, n int64, now time.Time) (Result, error) {
	var local [MaxLimits]Limit
	p := d.processes.Load()
	for i := range limits {
		l := limits[i]
		if p > 1 {
			l.Rate = (l.Rate + p - 1) / p
			l.Burst = (l.Burst + p - 1) / p
		}
		local[i] = l
	}
	return d.local.Allow(ctx, key, local[:len(limits)], n, now)
}

// claimProbe lets exactly one caller per ProbeInterval try the primary while degraded.
func (d *Degraded) claimProbe(t int64) bool {
	next := d.nextProbe.Load()
	return t >= next && d.nextProbe.CompareAndSwap(next, t+d.probe)
}
