package adaptive

import (
	"sync"
	"time"
)

// Defaults of delivery.adaptive (docs/rules.md).
const (
	DefaultDecrease          = 0.5
	DefaultIncreasePerSecond = 0.05
	// DefaultMinFraction is the floor of a key's outflow when min_outflow is not set: 1 % of
	// the configured outflow.
	DefaultMinFraction = 0.01
	// DefaultMaxKeys bounds the keys a Limiter remembers (about 100 bytes each).
	DefaultMaxKeys = 100_000
)

// Config is one rule's delivery.adaptive. The zero value takes every default.
type Config struct {
	// Decrease multiplies a key's outflow on a throttle (0 < Decrease < 1).
	Decrease float64
	// IncreasePerSecond is what a key gets back per second of successes, as a fraction of
	// its configured outflow (0.1: +1/s every second at 10/s).
	IncreasePerSecond float64
	// MinOutflow is the floor, in deliveries per second; 0: DefaultMinFraction of the
	// configured outflow.
	MinOutflow float64
	// MaxKeys bounds the keys remembered; 0: DefaultMaxKeys.
	MaxKeys int
}

func (c Config) withDefaults() Config {
	if c.Decrease <= 0 || c.Decrease >= 1 {
		c.Decrease = DefaultDecrease
	}
	if c.IncreasePerSecond <= 0 {
		c.IncreasePerSecond = DefaultIncreasePerSecond
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	return c
}

// key is what a Limiter remembers of one key that is below its configured outflow or held.
type key struct {
	// share is the key's outflow as a fraction of the configured one, in (0, 1): a fraction
	// rather than a rate, so a change of the configured outflow (sluice tune, an override)
	// applies at once and the key stays proportionally below it.
	share float64
	// ceiling is the share at the last throttle: the climb slows near it (see OnSuccess).
	ceiling float64
	// lastDecrease is the time of the last multiplicative decrease; throttles within one
	// interval of it (answers to deliveries sent before the decrease) do not decrease again.
	lastDecrease time.Time
	// lastSuccess is the time of the last success, for the additive increase.
	lastSuccess time.Time
	// held: no delivery of the key before this (a Retry-After).
	held time.Time
}

// decreaseGuard: throttles within this long of a decrease do not decrease again (answers
// to deliveries sent before it, several keys' deliveries in flight at once).
const decreaseGuard = time.Second

// Limiter is one rule's adaptive outflow: a share of the configured outflow per key,
// lowered by throttles and raised by successes.
type Limiter struct {
	cfg Config

	mu      sync.Mutex
	keys    map[string]*key
	evicted uint64
}

// New returns a Limiter with cfg (zero fields take the defaults).
func New(cfg Config) *Limiter {
	return &Limiter{cfg: cfg.withDefaults(), keys: map[string]*key{}}
}

// Config is the configuration in use, defaults filled in.
func (l *Limiter) Config() Config { return l.cfg }

// OnThrottle records that the sink throttled a delivery of k at now: a 429 or 503 (with
// retryAfter its Retry-After, 0 without one) or a timeout. The key's outflow is multiplied
// by Decrease (at most once per interval at its current outflow, so the answers to
// deliveries already sent do not compound it), floored at the minimum; a retryAfter > 0
// also holds the key until now+retryAfter.
func (l *Limiter) OnThrottle(k string, now time.Time, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[k]
	if s == nil {
		if len(l.keys) >= l.cfg.MaxKeys {
			l.evictOne()
		}
		s = &key{share: 1}
		l.keys[k] = s
	}
	if retryAfter > 0 {
		if h := now.Add(retryAfter); h.After(s.held) {
			s.held = h
		}
	}
	// An answer to a delivery sent before the last decrease says nothing new: one
	// decrease per round trip, as TCP's congestion window.
	if !s.lastDecrease.IsZero() && now.Sub(s.lastDecrease) < decreaseGuard {
		return
	}
	s.ceiling = s.share
	s.share *= l.cfg.Decrease
	s.lastDecrease = now
	// The climb starts when deliveries may start again: the hold is not a second of
	// successes.
	s.lastSuccess = maxTime(now, s.held)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// OnSuccess records that the sink accepted a delivery of k at now (2xx). The key's
// outflow climbs by IncreasePerSecond of the configured outflow per second since its
// previous success (a second at most: an idle key does not jump), but 50 times slower
// from 90 % to 105 % of the share it was last throttled at: it comes back quickly to just
// below the sink's limit, then probes it gently instead of hitting it again at full speed
// (every throttle costs the key its Retry-After, a whole second with HTTP's integer
// seconds), and climbs quickly again once past it (the sink raised its limit). A key back
// at its configured outflow is forgotten.
func (l *Limiter) OnSuccess(k string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[k]
	if s == nil {
		return
	}
	dt := now.Sub(s.lastSuccess)
	s.lastSuccess = now
	if dt <= 0 {
		return
	}
	dt = min(dt, time.Second)
	step := l.cfg.IncreasePerSecond * dt.Seconds()
	if s.share >= 0.9*s.ceiling && s.share <= 1.05*s.ceiling {
		step /= 50
	}
	s.share += step
	if s.share >= 1 && !now.Before(s.held) {
		delete(l.keys, k)
	}
}

// Rate is k's outflow now, in deliveries per second, given its configured outflow
// (after any override): configured for a key never throttled or recovered, else its
// share of configured, never below the minimum and never above configured.
func (l *Limiter) Rate(k string, configured float64) float64 {
	l.mu.Lock()
	s := l.keys[k]
	share := 1.0
	if s != nil {
		share = s.share
	}
	l.mu.Unlock()
	if share >= 1 {
		return configured
	}
	floor := l.cfg.MinOutflow
	if floor <= 0 {
		floor = DefaultMinFraction * configured
	}
	return min(configured, max(share*configured, floor))
}

// Every is Rate as the interval between two deliveries: configured is the rule's (or the
// override's) interval. A key at its configured outflow gets configured back exactly.
func (l *Limiter) Every(k string, configured time.Duration) time.Duration {
	if configured <= 0 {
		return configured
	}
	c := float64(time.Second) / float64(configured)
	r := l.Rate(k, c)
	if r >= c {
		return configured
	}
	return time.Duration(float64(time.Second) / r)
}

// HeldUntil is when k may be delivered again after a Retry-After; zero or past: now.
func (l *Limiter) HeldUntil(k string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.keys[k]; s != nil {
		return s.held
	}
	return time.Time{}
}

// Forget drops what the Limiter knows of k (the key emptied, or its rule changed hands).
func (l *Limiter) Forget(k string) {
	l.mu.Lock()
	delete(l.keys, k)
	l.mu.Unlock()
}

// Len is how many keys are remembered (below their configured outflow or held), for a
// gauge.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Evicted counts keys forgotten because MaxKeys was reached (each goes back to its
// configured outflow, and is throttled again if the sink still wants less).
func (l *Limiter) Evicted() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// evictOne forgets one key to make room: the first that map iteration yields, which is
// random — O(1), and no key can stay pinned by an attacker's flood of new keys.
func (l *Limiter) evictOne() {
	for k := range l.keys {
		delete(l.keys, k)
		l.evicted++
		return
	}
}

// State is what a new owner of a key needs to go on where the previous one left it: the
// key's share of its configured outflow, the share it was last throttled at, and its
// Retry-After hold (docs/design.md "Steering keys": a handover never raises a throttled
// key back to full speed at once).
type State struct {
	Share, Ceiling float64
	Held           time.Time
}

// State is k's state, ok false when k is at its configured outflow and not held.
func (l *Limiter) State(k string) (State, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.keys[k]
	if s == nil {
		return State{}, false
	}
	return State{Share: s.share, Ceiling: s.ceiling, Held: s.held}, true
}

// Restore takes over k's state from a previous owner at now: the climb starts from now.
// A state at or above the configured outflow and not held is ignored.
func (l *Limiter) Restore(k string, st State, now time.Time) {
	if (st.Share >= 1 || st.Share <= 0) && !st.Held.After(now) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.keys[k]; !ok && len(l.keys) >= l.cfg.MaxKeys {
		l.evictOne()
	}
	share := min(max(st.Share, 0), 1)
	if share == 0 {
		share = 1
	}
	l.keys[k] = &key{share: share, ceiling: st.Ceiling, held: st.Held, lastSuccess: maxTime(now, st.Held)}
}
