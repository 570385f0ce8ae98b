package rules

import (
	"time"

	"github.com/sluice-io/sluice/internal/window"
)

// This file is the validated, in-memory model of a rules file (docs/rules.md).
// Loading, validation and matching build and read these values; every other package
// (ingress, drainer, re-admitter) reads them and never sees YAML.
//
// All durations and rates are already normalised: a Rate is "Requests per Interval",
// whatever unit or interval the file used.

// Algorithm names one of the five admission-limit algorithms.
type Algorithm string

const (
	TokenBucket          Algorithm = "token_bucket"
	LeakyBucket          Algorithm = "leaky_bucket"
	FixedWindow          Algorithm = "fixed_window" // default, as in envoyproxy/ratelimit
	SlidingWindowLog     Algorithm = "sliding_window_log"
	SlidingWindowCounter Algorithm = "sliding_window_counter"
)

// Overflow says what happens to a message that cannot be queued now.
type Overflow string

const (
	OverflowReject Overflow = "reject" // default: 429
	OverflowPark   Overflow = "park"   // kept in the retry queue and re-admitted later
)

// Rate is Requests per Interval (e.g. 10 per 1s, 5 per 24h).
type Rate struct {
	Requests int64
	Interval time.Duration
}

// Zero reports whether the rate is unset.
func (r Rate) Zero() bool { return r.Requests == 0 || r.Interval == 0 }

// Every is the spacing between two requests at this rate (Interval / Requests).
func (r Rate) Every() time.Duration {
	if r.Requests <= 0 {
		return 0
	}
	return r.Interval / time.Duration(r.Requests)
}

// PerSecond is the rate in requests per second.
func (r Rate) PerSecond() float64 {
	if r.Interval <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Interval.Seconds()
}

// RateLimit is one admission limit on a descriptor (a descriptor may have several,
// evaluated together, all-or-nothing).
type RateLimit struct {
	Rate      Rate
	Algorithm Algorithm // default FixedWindow
	Burst     int64     // token_bucket / leaky_bucket only; default Rate.Requests
	Name      string    // optional; used in RateLimit-Policy and violated-policies (default: the rule's name)
	// TimeZone is `time_zone` (an IANA name such as Asia/Seoul): a fixed_window whose
	// interval divides a day turns at that zone's midnight (or hour) instead of UTC's,
	// and lasts 23 or 25 hours across a daylight-saving change. nil: UTC (the epoch).
	TimeZone *time.Location
}

// Queue is the per-key bounded queue (the leaky bucket used as a queue).
type Queue struct {
	Capacity     int64 // messages waiting per key
	Outflow      Rate  // per key
	TotalOutflow Rate  // optional: whole rule, fair across keys (Zero when unset)
	// MaxAge, when set, is how long after its submission a message is worth delivering: one
	// still waiting then goes to the dead letters with reason "expired". 0 = never expires.
	MaxAge time.Duration
	// MaxScheduled bounds the messages of one key waiting for a later delivery time
	// (deliver_at / delay); more are refused (429) at submit. Default Capacity.
	MaxScheduled int64
	// MaxBytes bounds the rule's whole queue (its stream): a flood of this rule is refused
	// (or parked) once it holds that much, while other rules keep admitting. 0 = the
	// ingress's -queue-max-bytes (default 1 GiB).
	MaxBytes int64
	// Partitions splits the rule's scheduler state in Redis into this many parts, each its
	// own hash slot, so one busy rule spreads over every master of a Redis Cluster
	// (queue.partitions). 0: the scheduler's default (queue.DefaultPartitions: 1 on a single
	// Redis or Sentinel, 8 on a Redis Cluster). Changing it on a live rule loses nothing
	// (see docs/operations.md, "Redis Cluster: one rule over every master").
	Partitions int
}

// MaxPartitions bounds queue.partitions.
const MaxPartitions = 256

// Sink is where drainers deliver. Exactly one of URL and NATSSubject is set.
type Sink struct {
	URL         string
	NATSSubject string
	Timeout     time.Duration // default 10s
	// SignKeys are the files of HMAC keys signing this rule's HTTP deliveries (each signs:
	// two during a key rotation), comma-separated, instead of the drainer's -sign-keys; empty = -sign-keys.
	// Read by the drainer, not when the rules load. A string, so Sink stays comparable.
	SignKeys string
	// SignScheme lays out the signature headers: "sluice" (Sluice-Signature) or
	// "standard-webhooks" (webhook-id, webhook-timestamp, webhook-signature); "" = the
	// drainer's -sign-scheme. HTTP sinks only.
	SignScheme string
	// MaxInFlight caps the rule's deliveries at the sink at once, over all its keys and
	// every drainer (a slot in Redis per delivery); 0 = no cap but each drainer's -workers.
	MaxInFlight int
	// Breaker is sink.breaker: pause the rule's deliveries while the sink fails for every
	// key (internal/breaker). Off unless set.
	Breaker Breaker
}

// Breaker is sink.breaker (internal/breaker's Config; the drain engine maps one to the
// other). Every field is filled in (defaults) when Enabled.
type Breaker struct {
	Enabled bool
	// Failures failures in a row, over at least MinKeys keys, all within Within, with no
	// success for Within, open the breaker.
	Failures int
	MinKeys  int
	Within   time.Duration
	// CoolDown is the wait before the first probe, doubling per failed probe up to
	// MaxCoolDown.
	CoolDown, MaxCoolDown time.Duration
}

// Spacing is delivery.spacing: how a key's deliveries are spaced (internal/spacing).
type Spacing string

const (
	// SpacingGCRA (default): outflow per second over time; a delivery that started late
	// does not delay the next slot, so two may start closer than 1/outflow.
	SpacingGCRA Spacing = "gcra"
	// SpacingStrict: two deliveries of a key always start at least 1/outflow apart,
	// measured from the actual start of the previous one.
	SpacingStrict Spacing = "strict"
)

// Adaptive is delivery.adaptive: the sink's 429/503 and timeouts lower a key's outflow,
// its successes raise it back to the configured value (internal/adaptive). Every field is
// filled in (defaults) when Enabled.
type Adaptive struct {
	Enabled bool
	// Decrease multiplies a key's outflow on a throttle, in (0, 1).
	Decrease float64
	// IncreasePerSecond is the share of the configured outflow given back per second of
	// successes, in (0, 1].
	IncreasePerSecond float64
	// MinOutflow is the floor; Zero: 1 % of the outflow (adaptive.DefaultMinFraction).
	MinOutflow Rate
}

// Delivery is the retry policy for deliveries to the sink.
type Delivery struct {
	MaxAttempts int           // default 8
	MinBackoff  time.Duration // default 1s
	MaxBackoff  time.Duration // default 5m
	// MaxInFlight is how many of one key's messages may be at the sink at once (default 1).
	// Above 1 the key's messages still leave at its outflow, one per slot, but a slow sink
	// no longer holds back the next slot; it needs ordering: relaxed.
	MaxInFlight int
	// Window is delivery.window: when deliveries may happen. The zero Window is always open.
	Window window.Window
	// Spacing is delivery.spacing; "" (not set) is SpacingGCRA.
	Spacing Spacing
	// Adaptive is delivery.adaptive (off unless set).
	Adaptive Adaptive
}

// Park is the policy for parked messages.
type Park struct {
	MaxAge time.Duration // default 24h; parked longer than this → dead
}

// Ordering of deliveries within one key.
type Ordering string

const (
	OrderingStrict  Ordering = "strict" // default: a retrying message holds back the key's later messages
	OrderingRelaxed Ordering = "relaxed"
)

// Rule is one descriptor entry of the rules file that carries behaviour: a rate limit,
// a queue, or both. Rules are matched by Domain plus the descriptor path.
type Rule struct {
	// Name is the stable id used by the admin API, metrics and stream names
	// (default: domain, then the path's keys and values, joined by "_" and sanitised
	// to [A-Za-z0-9_-], e.g. "orders_merchant_id"; see defaultName for why).
	Name   string
	Domain string
	// Path is the descriptor path from the domain root to this entry, e.g.
	// [{message_type marketing} {user_id ""}]. An empty Value means "one bucket per distinct value".
	Path []PathEntry

	RateLimits []RateLimit // admission limits; empty when none
	Unlimited  bool        // envoy `unlimited: true`: always OK, never counted
	ShadowMode bool        // envoy `shadow_mode`: decide and report, never deny
	Replaces   []string    // envoy `replaces`: names of rules this one replaces when both match
	// ResponseHeaders asks the envoy RLS gRPC answer to carry the rate-limit headers
	// (response_headers_to_add), as envoy's LIMIT_RESPONSE_HEADERS_ENABLED does for every
	// limit. POST /v1/check and POST /v1/messages always send them. Default false.
	ResponseHeaders bool
	// QuotaMode is envoy's `quota_mode`: the descriptor still answers OVER_LIMIT when over,
	// but the overall answer is OVER_LIMIT only when a descriptor that is not in quota
	// mode is over, or every quota-mode descriptor of the request is. Default false.
	QuotaMode bool
	// AllOrNothing keeps sluice's counting for a check rule: hits that do not all pass
	// are not counted at all, and a refusal answers the untouched limit_remaining.
	// Default false: a check rule's fixed_window limits count as envoy counts a
	// hits_addend — whatever the answer — and answer limit_remaining 0 once over. Queue
	// rules (and limits of the other algorithms) are always all-or-nothing.
	AllOrNothing bool
	// DetailedMetric is envoy's `detailed_metric`: sluice_checks_detailed_total counts
	// this rule's checks per descriptor value (bounded, see the ingress). Default false.
	DetailedMetric bool
	// Metadata is envoy's descriptor `metadata` (JSON-compatible values), sent back in
	// a passing answer's dynamic metadata when -response-dynamic-metadata is on.
	Metadata map[string]any
	// Checks says how POST /v1/check, /json and the envoy RLS count against a queue rule:
	// "" (`checks: own`, the default) on counters of their own, ChecksShare on the
	// counters its admissions spend (so a check can use up the quota of submissions).
	// Check-only rules have no other counters: always "".
	Checks Checks
	// LimitOverride bounds what a check's descriptor `limit` (envoy's RateLimitOverride)
	// may ask under this rule. The zero value is the ingress's defaults.
	LimitOverride LimitOverride

	Queue    *Queue // nil for check-only rules
	Overflow Overflow
	Park     Park
	Sink     Sink
	Delivery Delivery
	Ordering Ordering

	// Where the rule was defined, for error messages.
	File string
	Line int

	// varying lists the Path levels (indices) whose request values make up the Key:
	// levels with no configured value or a wildcard value. Set by the loader.
	varying []int
}

// Checks is a queue rule's `checks`.
type Checks string

const (
	ChecksOwn   Checks = "own"   // default (held as ""): checks count on counters of their own
	ChecksShare Checks = "share" // checks spend the admission counters of submissions
)

// LimitOverride is a rule's `limit_override`: the most a check's limit override may ask.
// Zero fields take the ingress's defaults (-override-max-factor, -override-max-window).
type LimitOverride struct {
	// MaxFactor: an override's rate (requests per window) is at most this many times the
	// rate of each of the rule's limits. 0: the default.
	MaxFactor int64
	// Refused: `max_factor: 0`, the rule takes no overrides at all.
	Refused bool
	// MaxWindow is the longest window (unit × unit_multiplier) an override may ask; its
	// counter lives no longer. 0: the default.
	MaxWindow time.Duration
}

// MaxOverrideFactor and MaxOverrideWindow bound limit_override's fields (and the flags
// that default them): a window of a year at most, so no counter outlives it.
const (
	MaxOverrideFactor = 1_000_000
	MaxOverrideWindow = 365 * 24 * time.Hour
)

// PathEntry is one level of a descriptor path.
type PathEntry struct {
	Key   string
	Value string // "" = any value (a bucket per value); may contain '*' wildcards
}

// HasQueue reports whether the rule queues messages (POST /v1/messages) rather than only
// answering checks.
func (r *Rule) HasQueue() bool { return r.Queue != nil }
