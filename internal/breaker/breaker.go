package breaker

import (
	"sync"
	"time"
)

// State is a breaker's state; its value is the sluice_breaker_state gauge's.
type State int

const (
	Closed   State = 0 // deliveries go
	HalfOpen State = 1 // one probe delivery is allowed; its answer closes or reopens
	Open     State = 2 // deliveries wait for the cool-down
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "unknown"
}

// Defaults of sink.breaker (docs/rules.md).
const (
	DefaultFailures    = 10
	DefaultKeys        = 3
	DefaultWindow      = 10 * time.Second
	DefaultCoolDown    = 5 * time.Second
	DefaultMaxCoolDown = 5 * time.Minute
	// DefaultProbeTimeout: a probe whose answer never came (its worker died, the engine
	// lost it) is replaced after this long.
	DefaultProbeTimeout = time.Minute
)

// Config is one rule's sink.breaker. Zero fields take the defaults.
type Config struct {
	// Failures, Keys, Window: the breaker opens on Failures failures in a row, over at
	// least Keys distinct keys, all within Window, with no success for Window.
	Failures int
	Keys     int
	Window   time.Duration
	// CoolDown is the wait before the first probe; it doubles with every failed probe up
	// to MaxCoolDown, and starts over when the breaker closes.
	CoolDown, MaxCoolDown time.Duration
	// ProbeTimeout: a probe not answered within it is given up and another allowed.
	ProbeTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Failures <= 0 {
		c.Failures = DefaultFailures
	}
	if c.Keys <= 0 {
		c.Keys = DefaultKeys
	}
	c.Keys = min(c.Keys, c.Failures)
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.CoolDown <= 0 {
		c.CoolDown = DefaultCoolDown
	}
	if c.MaxCoolDown < c.CoolDown {
		c.MaxCoolDown = max(DefaultMaxCoolDown, c.CoolDown)
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	return c
}

type failure struct {
	at  time.Time
	key string
}

// Breaker is one rule's sink breaker. Use New.
type Breaker struct {
	rule string
	cfg  Config
	m    *Metrics

	mu          sync.Mutex
	state       State
	failures    []failure // since the last success, the last cfg.Failures
	lastSuccess time.Time
	coolDown    time.Duration // the current one
	until       time.Time     // Open: when the next probe may go
	probeAt     time.Time     // HalfOpen: when the probe went
	since       time.Time     // when the current state was entered (zero: closed since New)
	notify      func()        // Notify
}

// Snapshot is a breaker's state for display (the admin API): its state, since when, and
// when an open breaker lets its next probe go.
type Snapshot struct {
	State     State
	Since     time.Time
	NextProbe time.Time
}

// Notify sets f to be called (in its own goroutine, so it may take time and call the
// breaker) after every change of state: the engine publishes Snapshot for the admin API.
// Changes are rare (at most one per cool-down and probe), never one per delivery. Set it
// before the breaker is used.
func (b *Breaker) Notify(f func()) {
	b.mu.Lock()
	b.notify = f
	b.mu.Unlock()
}

// Snapshot is the breaker's state now.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Snapshot{State: b.state, Since: b.since}
	if b.state == Open {
		s.NextProbe = b.until
	}
	return s
}

// New returns a closed breaker for rule. m may be nil (no metrics).
func New(rule string, cfg Config, m *Metrics) *Breaker {
	cfg = cfg.withDefaults()
	b := &Breaker{rule: rule, cfg: cfg, m: m, coolDown: cfg.CoolDown}
	m.set(rule, Closed)
	return b
}

// Config is the configuration in use, defaults filled in.
func (b *Breaker) Config() Config { return b.cfg }

// Allow reports whether a delivery of the rule may start at now. Closed: yes. Open: no
// until the cool-down has passed; then the breaker is half-open and this one delivery is
// the probe (yes). Half-open: no while the probe is out (yes again once it is older than
// ProbeTimeout). A delivery refused here is not an attempt: the engine puts the key back
// at Until and counts nothing.
func (b *Breaker) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true
	case Open:
		if now.Before(b.until) {
			return false
		}
		b.to(HalfOpen, now)
		b.probeAt = now
		return true
	default: // HalfOpen
		if now.Sub(b.probeAt) < b.cfg.ProbeTimeout {
			return false
		}
		b.probeAt = now
		return true
	}
}

// Until is when Allow may next say yes: zero while closed, the end of the cool-down while
// open, the probe's timeout while half-open. The engine schedules the rule's keys no
// earlier.
func (b *Breaker) Until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Open:
		return b.until
	case HalfOpen:
		return b.probeAt.Add(b.cfg.ProbeTimeout)
	}
	return time.Time{}
}

// State is the breaker's state now.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// OnSuccess records an answer that shows the sink works (2xx; also a 4xx, which is about
// the message, not the sink): the breaker closes and forgets its failures.
func (b *Breaker) OnSuccess(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastSuccess = now
	b.failures = b.failures[:0]
	if b.state != Closed {
		b.coolDown = b.cfg.CoolDown
		b.to(Closed, now)
	}
}

// OnFailure records a failure of the sink itself for key at now: connection refused or
// reset, DNS or TLS failure, a 5xx other than 503, a timeout. (A 429 or 503 is the sink
// pacing one key: adaptive outflow's business, not the breaker's.) A failed probe reopens
// the breaker with a doubled cool-down; while closed, the breaker opens when the last
// Failures failures are all within Window, span at least Keys keys, and nothing succeeded
// for Window.
func (b *Breaker) OnFailure(key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Open:
		return // a delivery that started before the breaker opened
	case HalfOpen:
		b.coolDown = min(2*b.coolDown, b.cfg.MaxCoolDown)
		b.open(now)
		return
	}
	if len(b.failures) == b.cfg.Failures {
		copy(b.failures, b.failures[1:])
		b.failures = b.failures[:len(b.failures)-1]
	}
	b.failures = append(b.failures, failure{now, key})
	if len(b.failures) < b.cfg.Failures || now.Sub(b.failures[0].at) > b.cfg.Window {
		return
	}
	if !b.lastSuccess.IsZero() && now.Sub(b.lastSuccess) < b.cfg.Window {
		return
	}
	keys := make(map[string]struct{}, b.cfg.Keys)
	for _, f := range b.failures {
		keys[f.key] = struct{}{}
		if len(keys) >= b.cfg.Keys {
			b.open(now)
			return
		}
	}
}

func (b *Breaker) open(now time.Time) {
	b.failures = b.failures[:0]
	b.until = now.Add(b.coolDown)
	b.to(Open, now)
}

func (b *Breaker) to(s State, now time.Time) {
	if b.state == s {
		return
	}
	b.state = s
	b.since = now
	b.m.transition(b.rule, s)
	if b.notify != nil {
		go b.notify()
	}
}
