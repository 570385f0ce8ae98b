package rules

import (
	"errors"
	"fmt"
	"time"
)

// Validate checks the invariants every rule of a loaded Set satisfies. Load and Parse
// only return rules that pass it; it is exported for code that derives a rule from a
// loaded one (e.g. an admin override of outflow or capacity) and wants the same checks.
func (r *Rule) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !validName.MatchString(r.Name) || len(r.Name) > MaxNameLen {
		bad("name %q: must be 1–%d characters of %s", r.Name, MaxNameLen, allowedNameCharsPretty)
	}
	if r.Domain == "" {
		bad("domain: must not be empty")
	}
	if len(r.Path) == 0 {
		bad("path: must not be empty")
	}
	for i, e := range r.Path {
		if e.Key == "" {
			bad("path[%d].key: must not be empty", i)
		}
	}
	if len(r.RateLimits) == 0 && r.Queue == nil && !r.Unlimited {
		bad("needs a rate_limit or a queue")
	}
	for i, l := range r.RateLimits {
		if l.Rate.Interval <= 0 || l.Rate.Requests < 0 {
			bad("rate_limit[%d]: needs interval > 0 and requests_per_unit ≥ 0", i)
		}
		if !algorithms[l.Algorithm] {
			bad("rate_limit[%d].algorithm: unknown %q", i, l.Algorithm)
		}
		if l.Burst < 0 {
			bad("rate_limit[%d].burst: must be ≥ 0", i)
		}
		if l.TimeZone != nil && (l.Algorithm != FixedWindow || l.Rate.Interval <= 0 || (24*time.Hour)%l.Rate.Interval != 0) {
			bad("rate_limit[%d].time_zone: only applies to a fixed_window that divides a day", i)
		}
	}
	if q := r.Queue; q != nil {
		if q.Capacity < 1 {
			bad("queue.capacity: must be ≥ 1 (got %d)", q.Capacity)
		}
		if q.Outflow.Requests < 1 || q.Outflow.Interval <= 0 {
			bad("queue.outflow: must be > 0")
		}
		if !q.TotalOutflow.Zero() && q.TotalOutflow.PerSecond() < q.Outflow.PerSecond() {
			bad("queue.total_outflow: must be ≥ outflow")
		}
		if r.Sink.URL == "" && r.Sink.NATSSubject == "" {
			bad("sink: required for a rule with a queue")
		}
	}
	if r.Sink.URL != "" && r.Sink.NATSSubject != "" {
		bad("sink: url and nats_subject are exclusive")
	}
	if r.Sink.Timeout <= 0 {
		bad("sink.timeout: must be > 0")
	}
	if r.Overflow != OverflowReject && r.Overflow != OverflowPark {
		bad("overflow: must be reject or park (got %q)", r.Overflow)
	}
	if r.Overflow == OverflowPark && r.Queue == nil && len(r.RateLimits) == 0 {
		bad("overflow: park needs a queue or a rate_limit")
	}
	if r.Park.MaxAge <= 0 {
		bad("park.max_age: must be > 0")
	}
	if r.Delivery.MaxAttempts < 1 || r.Delivery.MinBackoff <= 0 || r.Delivery.MaxBackoff < r.Delivery.MinBackoff {
		bad("delivery: needs max_attempts ≥ 1 and 0 < min_backoff ≤ max_backoff")
	}
	if r.Delivery.Spacing != "" && r.Delivery.Spacing != SpacingGCRA && r.Delivery.Spacing != SpacingStrict { // "" (a rule built in code): gcra
		bad("delivery.spacing: must be gcra or strict (got %q)", r.Delivery.Spacing)
	}
	if w := r.Delivery.Window; w.Set && (w.From == w.To || w.From < 0 || w.From >= 24*time.Hour || w.To <= 0 || w.To > 24*time.Hour) {
		bad("delivery.window: needs 00:00 ≤ from < 24:00, 00:00 < to ≤ 24:00 and from ≠ to")
	}
	if a := r.Delivery.Adaptive; a.Enabled {
		if a.Decrease <= 0 || a.Decrease >= 1 || a.IncreasePerSecond <= 0 || a.IncreasePerSecond > 1 {
			bad("delivery.adaptive: needs 0 < decrease < 1 and 0 < increase_per_second ≤ 1")
		}
		if r.Queue != nil && !a.MinOutflow.Zero() && a.MinOutflow.PerSecond() > r.Queue.Outflow.PerSecond() {
			bad("delivery.adaptive.min_outflow: must be ≤ queue.outflow")
		}
	}
	if b := r.Sink.Breaker; b.Enabled && (b.Failures < 1 || b.MinKeys < 1 || b.MinKeys > b.Failures || b.Within <= 0 || b.CoolDown <= 0 || b.MaxCoolDown < b.CoolDown) {
		bad("sink.breaker: needs 1 ≤ min_keys ≤ failures, within > 0 and 0 < cool_down ≤ max_cool_down")
	}
	if r.Ordering != OrderingStrict && r.Ordering != OrderingRelaxed {
		bad("ordering: must be strict or relaxed (got %q)", r.Ordering)
	}
	for _, name := range r.Replaces {
		if name == "" || name == r.Name {
			bad("replaces: %q is empty or the rule itself", name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rules: rule %q: %w", r.Name, err)
	}
	return nil
}
