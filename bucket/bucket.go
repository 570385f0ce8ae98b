package bucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Algorithm names one of the five admission-limit algorithms. The strings are the
// ones used in rules files (and by internal/rules), so a rule's algorithm converts
// with a plain type conversion.
type Algorithm string

const (
	TokenBucket          Algorithm = "token_bucket"
	LeakyBucket          Algorithm = "leaky_bucket"
	FixedWindow          Algorithm = "fixed_window" // the default, as in envoyproxy/ratelimit
	SlidingWindowLog     Algorithm = "sliding_window_log"
	SlidingWindowCounter Algorithm = "sliding_window_counter"
)

// MaxLimits is the most limits one decision may evaluate together. Results carry their
// decisions in a fixed array of this size so that a decision never allocates.
const MaxLimits = 4

// Never is the RetryAfter of a request that can never pass: it asks for more hits than
// the limit's capacity (n > Burst for the buckets, n > Rate for the windows).
const Never = time.Duration(math.MaxInt64)

// maxExact bounds every intermediate value of the integer arithmetic, so the Lua
// scripts (whose numbers are IEEE doubles) compute exactly what the Go code computes.
const maxExact = 1 << 53

var (
	// ErrInvalid is wrapped by every error about a caller's input (a bad Limit, a
	// negative n, too many limits). A Degraded store passes these through instead of
	// treating them as an outage.
	ErrInvalid = errors.New("bucket: invalid input")
	// ErrTooManyLimits is returned when a decision names more than MaxLimits limits.
	ErrTooManyLimits = fmt.Errorf("%w: more than %d limits in one decision", ErrInvalid, MaxLimits)
	// ErrNegativeHits is returned for n < 0.
	ErrNegativeHits = fmt.Errorf("%w: negative hits", ErrInvalid)
	// ErrBadTime is returned for a now at or before the Unix epoch (a zero time.Time,
	// usually): windows are counted from the epoch.
	ErrBadTime = fmt.Errorf("%w: now is not after the Unix epoch", ErrInvalid)
)

// Limit is one admission limit: Rate requests per Interval, decided by Algorithm.
//
// The zero value is not a valid Limit (Rate and Interval are required).
type Limit struct {
	// Algorithm decides how requests are counted. Default FixedWindow.
	Algorithm Algorithm
	// Rate is the number of requests allowed per Interval. Required, ≥ 1.
	Rate int64
	// Interval is the window length, or the time a bucket needs to refill Rate tokens.
	// Required; a whole number of milliseconds, ≥ 1ms (state is kept in milliseconds
	// so the memory and Redis stores agree to the unit).
	Interval time.Duration
	// Burst is the bucket capacity of TokenBucket and LeakyBucket: how many requests
	// may pass at once after a quiet period. Default Rate. Ignored by the windows.
	Burst int64
	// Name is the policy name for RateLimit-Policy / violated-policies headers. It
	// plays no part in the decision or in where the state is stored.
	Name string
	// Shadow makes the limit report what it would decide without ever denying: its
	// Decision says Allowed=false when it would have denied, Result.ShadowDenied is
	// set, but Result.Allowed ignores it. When the request is admitted, a shadow limit
	// counts it only if it would itself have allowed it, so its state stays what it
	// would be if it were enforced.
	Shadow bool
	// CountOver counts the hits even when they do not pass, as envoyproxy/ratelimit
	// counts a hits_addend (an INCRBY whatever the answer): the request is allowed when
	// the window's count plus n stays within Rate, the n hits are added either way, and
	// Remaining is what is left after them (0 once over). FixedWindow only (the one
	// algorithm envoy has); Validate refuses it with any other. Its refusal still keeps
	// the other limits of the key from counting the hits (they stay all-or-nothing).
	// Default false: all-or-nothing (a refused request counts nowhere).
	CountOver bool
	// Location aligns a FixedWindow's windows to that time zone's wall clock instead of
	// the Unix epoch: a day window turns at the zone's midnight, an hour window at its
	// hour (Asia/Kolkata's at :30 past the UTC hour), and a day across a daylight-saving
	// change lasts 23 or 25 hours (zone.go). Interval must divide a day (1h, 6h, 24h,
	// 15m…). FixedWindow only; Validate refuses it with the other algorithms, which have
	// no window edges to move. The state is kept apart from the same limit's in UTC (its
	// Redis key ends in "@" and the zone's name). Default nil: epoch-aligned windows
	// (time.UTC is the same).
	Location *time.Location
}

// params is a validated Limit in the integer units the algorithms use.
type params struct {
	alg   byte  // one of the alg* codes, shared with the Lua script
	rate  int64 // requests per interval
	ivl   int64 // interval in milliseconds
	burst int64 // bucket capacity (== rate for the windows)
	loc   *time.Location
	// The window of a zoned fixed window (algZoned) that holds the decision's now:
	// start and length in ms. Set per decision by validate; not part of the limit's
	// identity (see sameLimit).
	ws, wl int64
}

// sameLimit reports whether p and q are the same limit (the per-decision window of a
// zoned fixed window aside).
func (p *params) sameLimit(q *params) bool {
	return p.alg == q.alg && p.rate == q.rate && p.ivl == q.ivl && p.burst == q.burst && sameZone(p.loc, q.loc)
}

// sameZone compares zones by name: each time.LoadLocation returns a new *Location, so a
// rules reload must not make the same zone a different limit.
func sameZone(a, b *time.Location) bool {
	return a == b || (a != nil && b != nil && a.String() == b.String())
}

// Algorithm codes, also used by limits.lua; keep in sync.
const (
	algToken   = 1
	algLeaky   = 2
	algFixed   = 3
	algLog     = 4
	algCounter = 5
	algZoned   = 6 // a fixed window with a Location: state a is the window's start (ms)
)

var algCodes = [...]string{algToken: "tb", algLeaky: "lb", algFixed: "fw", algLog: "sl", algCounter: "sc", algZoned: "fw"}

const day = 24 * time.Hour

// params validates l and converts it. It does not allocate unless l is invalid.
func (l *Limit) params() (params, error) {
	var p params
	switch l.Algorithm {
	case TokenBucket:
		p.alg = algToken
	case LeakyBucket:
		p.alg = algLeaky
	case FixedWindow, "":
		p.alg = algFixed
	case SlidingWindowLog:
		p.alg = algLog
	case SlidingWindowCounter:
		p.alg = algCounter
	default:
		return p, fmt.Errorf("%w: unknown algorithm %q", ErrInvalid, l.Algorithm)
	}
	if l.Rate < 1 {
		return p, fmt.Errorf("%w: rate %d < 1", ErrInvalid, l.Rate)
	}
	if l.Interval < time.Millisecond || l.Interval%time.Millisecond != 0 {
		return p, fmt.Errorf("%w: interval %v is not a whole number of milliseconds ≥ 1ms", ErrInvalid, l.Interval)
	}
	if l.CountOver && p.alg != algFixed {
		return p, fmt.Errorf("%w: CountOver applies to fixed_window only, not %s", ErrInvalid, l.Algorithm)
	}
	if l.Location != nil && l.Location != time.UTC {
		if p.alg != algFixed {
			return p, fmt.Errorf("%w: Location applies to fixed_window only, not %s", ErrInvalid, l.Algorithm)
		}
		if day%l.Interval != 0 {
			return p, fmt.Errorf("%w: a fixed window in a time zone must divide a day, not %v", ErrInvalid, l.Interval)
		}
		p.alg, p.loc = algZoned, l.Location
	}
	p.rate, p.ivl, p.burst = l.Rate, l.Interval.Milliseconds(), l.Rate
	if (p.alg == algToken || p.alg == algLeaky) && l.Burst != 0 {
		if l.Burst < 1 {
			return p, fmt.Errorf("%w: burst %d < 1", ErrInvalid, l.Burst)
		}
		p.burst = l.Burst
	}
	if max(p.burst, p.rate) >= maxExact/p.ivl-1 {
		return p, fmt.Errorf("%w: rate or burst × interval(ms) exceeds 2^53 (%d, %v)", ErrInvalid, max(p.burst, p.rate), l.Interval)
	}
	return p, nil
}

// Validate reports whether l can be used in a decision. Stores validate on every call;
// callers use it to refuse a bad configuration early.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// Decision is what one limit says about one request.
//
// It carries everything the rate-limit response headers need:
// X-RateLimit-Limit = Limit, X-RateLimit-Remaining = Remaining, X-RateLimit-Reset =
// ResetAfter, Retry-After = RetryAfter (on denial), and the IETF draft's
// RateLimit-Policy: "name";q=Limit;w=Window and RateLimit: "name";r=Remaining;t=ResetAfter.
type Decision struct {
	// Allowed is this limit's verdict (for a shadow limit: what it would have said).
	Allowed bool
	// Limit is the quota: Rate for the windows, Burst for the buckets.
	Limit int64
	// Remaining is how many more hits would be allowed right now (after this request
	// when it was admitted; as before it when the decision was a denial).
	Remaining int64
	// ResetAfter is the time until Remaining grows by one: the window's end for a
	// fixed window, the next token for a bucket, the oldest entry's expiry for a log.
	// It is 0 when Remaining == Limit.
	ResetAfter time.Duration
	// RetryAfter is the time until a request of the same n would be allowed by this
	// limit; 0 when allowed, Never when n exceeds the limit's capacity.
	RetryAfter time.Duration
	// Window is the policy window for RateLimit-Policy w=: Interval for the windows,
	// the time to refill a whole Burst for the buckets.
	Window time.Duration
}

// Result is the outcome of one decision over all the limits of a key.
type Result struct {
	// Allowed is true when every enforced (non-shadow) limit allowed the request. The
	// hits were then counted against every limit; when false, nothing was counted.
	Allowed bool
	// ShadowDenied is true when a shadow limit would have denied the request.
	ShadowDenied bool
	// Index is the decision that should drive the response headers: when denied, the
	// enforced limit that frees last (largest RetryAfter); when allowed, the enforced
	// limit with the fewest Remaining. Only when every limit is a shadow limit are
	// shadow limits considered. -1 when there were no limits.
	Index int
	// N is the number of decisions in Decisions, equal to the number of limits.
	N int
	// Decisions holds one Decision per limit, in the order of the limits.
	Decisions [MaxLimits]Decision
}

// Decision returns the decision at Index (the zero Decision when there is none).
func (r *Result) Decision() Decision {
	if r.Index < 0 || r.Index >= r.N {
		return Decision{}
	}
	return r.Decisions[r.Index]
}

// RetryAfter is the time until this request could pass every enforced limit (0 when
// allowed, Never when it never can).
func (r *Result) RetryAfter() time.Duration {
	if r.Allowed {
		return 0
	}
	return r.Decision().RetryAfter
}

// Store decides admissions for keys. Implementations are safe for concurrent use.
type Store interface {
	// Allow decides whether n hits for key may pass every limit at now, and counts
	// them when they may (all-or-nothing across limits). n == 0 peeks without
	// counting. A denial is a Result with Allowed false, never an error; errors mean
	// invalid input (wrapping ErrInvalid) or a failing backend.
	//
	// key should identify the rule as well as the key (e.g. rule name + "\x00" +
	// key), since stores share one namespace. Use one key with the same limits in the
	// same order. When a limit's parameters change (a rules reload), the memory store
	// starts it from a fresh state and the Redis store continues from the state kept
	// under the same algorithm and interval, clamped to the new limit.
	Allow(ctx context.Context, key string, limits []Limit, n int64, now time.Time) (Result, error)
}

// finish computes Allowed, ShadowDenied and Index once every Decision is filled in.
func (r *Result) finish(limits []Limit) {
	r.Allowed, r.ShadowDenied, r.Index = true, false, -1
	allShadow := true
	for i := 0; i < r.N; i++ {
		switch {
		case !limits[i].Shadow:
			allShadow = false
			if !r.Decisions[i].Allowed {
				r.Allowed = false
			}
		case !r.Decisions[i].Allowed:
			r.ShadowDenied = true
		}
	}
	denied := !r.Allowed || (allShadow && r.ShadowDenied)
	for i := 0; i < r.N; i++ {
		d := &r.Decisions[i]
		if (limits[i].Shadow && !allShadow) || (denied && d.Allowed) {
			continue // not a candidate for the headers
		}
		if r.Index < 0 {
			r.Index = i
			continue
		}
		best := &r.Decisions[r.Index]
		if denied {
			if d.RetryAfter > best.RetryAfter {
				r.Index = i
			}
		} else if d.Remaining < best.Remaining || (d.Remaining == best.Remaining && d.ResetAfter > best.ResetAfter) {
			r.Index = i
		}
	}
}

func ms(d int64) time.Duration {
	if d < 0 {
		return Never
	}
	return time.Duration(d) * time.Millisecond
}
