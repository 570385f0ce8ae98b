package rules

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/bucket"
)

var algorithms = map[Algorithm]bool{
	TokenBucket: true, LeakyBucket: true, FixedWindow: true,
	SlidingWindowLog: true, SlidingWindowCounter: true,
}

// rateLimits parses `rate_limit:`, either envoy's single mapping or our list of limits.
// It reports whether the descriptor is a rule because of it: true whenever the field is
// present, even malformed (the problem is reported here, not again as "no rate_limit").
func (p *fileParser) rateLimits(n *yaml.Node, field string, rule *Rule) bool {
	n = resolve(n)
	if n != nil && n.Kind == yaml.SequenceNode {
		if len(n.Content) == 0 {
			p.errorf(n, field, "must list at least one limit")
			return true
		}
		for i, item := range n.Content {
			sub := fmt.Sprintf("%s[%d]", field, i)
			m, ok := p.mapping(item, sub, listLimitFields)
			if !ok {
				continue
			}
			if l, ok := p.limit(m, sub, resolve(item)); ok {
				rule.RateLimits = append(rule.RateLimits, l)
			}
		}
		return true
	}
	if n == nil || n.Kind != yaml.MappingNode {
		p.errorf(n, field, "must be a mapping {unit, requests_per_unit, …} or a list of them (got %s)", describe(n))
		return true
	}
	m, ok := p.mapping(n, field, envoyLimitFields)
	if !ok {
		return true // present but malformed: reported; still a rule for the checks that follow
	}
	if v, has := m["replaces"]; has {
		rule.Replaces = p.replaces(v, joinField(field, "replaces"))
	}
	unlimited := false
	if v, has := m["unlimited"]; has {
		unlimited, _ = p.bool(v, joinField(field, "unlimited"))
	}
	if unlimited {
		rule.Unlimited = true
		// envoy: "should not specify rate limit unit when unlimited". requests_per_unit
		// is tolerated (and ignored) as envoy does, so envoy files load unchanged.
		for _, k := range []string{"unit", "interval", "algorithm", "burst", "unit_multiplier", "time_zone"} {
			if v, has := m[k]; has {
				p.errorf(v, joinField(field, k), "must not be set when unlimited is true")
			}
		}
		if v, has := m["name"]; has {
			// Validated only: envoy never replaces an unlimited limit (it is set
			// aside before replacements are applied), so its name has no use.
			p.str(v, joinField(field, "name"))
		}
	} else if l, ok := p.limit(m, field, n); ok {
		rule.RateLimits = append(rule.RateLimits, l)
	}
	for _, r := range rule.Replaces {
		if r != "" && len(rule.RateLimits) > 0 && r == rule.RateLimits[0].Name {
			p.errorf(m["replaces"], joinField(field, "replaces"), "must not name the limit itself (%q)", r)
		}
	}
	return true
}

func (p *fileParser) replaces(n *yaml.Node, field string) []string {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "must be a list of {name: …} (got %s)", describe(n))
		return nil
	}
	var out []string
	for i, item := range n.Content {
		sub := fmt.Sprintf("%s[%d]", field, i)
		m, ok := p.mapping(item, sub, replacesFields)
		if !ok {
			continue
		}
		name, ok := p.str(m["name"], joinField(sub, "name"))
		if ok && name == "" {
			p.errorf(resolve(item), joinField(sub, "name"), "required (envoy: no empty replaces entry)")
			continue
		}
		if ok {
			out = append(out, name)
		}
	}
	return out
}

// limit parses one admission limit: a rate plus algorithm, burst and name.
func (p *fileParser) limit(m map[string]*yaml.Node, field string, at *yaml.Node) (RateLimit, bool) {
	rate, ok := p.rate(m, field, at, true)
	l := RateLimit{Rate: rate, Algorithm: DefaultAlgorithm}
	if v, has := m["algorithm"]; has {
		s, sok := p.str(v, joinField(field, "algorithm"))
		switch {
		case !sok:
			ok = false
		case algorithms[Algorithm(s)]:
			l.Algorithm = Algorithm(s)
		default:
			p.errorf(v, joinField(field, "algorithm"),
				"must be one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter (got %q)", s)
			ok = false
		}
	}
	l.Burst = l.Rate.Requests
	if v, has := m["burst"]; has {
		b, bok := p.int64(v, joinField(field, "burst"))
		switch {
		case !bok:
			ok = false
		case l.Algorithm != TokenBucket && l.Algorithm != LeakyBucket:
			p.errorf(v, joinField(field, "burst"), "only applies to token_bucket and leaky_bucket (algorithm is %s)", l.Algorithm)
			ok = false
		case b < 1:
			p.errorf(v, joinField(field, "burst"), "must be ≥ 1 (got %d)", b)
			ok = false
		default:
			l.Burst = b
		}
	}
	if v, has := m["name"]; has {
		s, sok := p.str(v, joinField(field, "name"))
		ok = ok && sok
		l.Name = s
	}
	if v, has := m["time_zone"]; has {
		loc, zok := p.timeZone(v, joinField(field, "time_zone"), l)
		ok = ok && zok
		l.TimeZone = loc
	}
	if ok && l.Rate.Requests > 0 {
		// What the limiter cannot count is refused here, naming the field, rather than
		// answering every admission and check of the rule with a 500: an interval that is
		// no whole number of milliseconds, or requests (burst) × interval in milliseconds
		// beyond 2^53.
		if err := (bucket.Limit{Algorithm: bucket.Algorithm(l.Algorithm), Rate: l.Rate.Requests, Interval: l.Rate.Interval, Burst: l.Burst}).Validate(); err != nil {
			p.errorf(at, field, "the limiter cannot count this limit: %s", strings.TrimPrefix(err.Error(), bucket.ErrInvalid.Error()+": "))
			ok = false
		}
	}
	return l, ok
}

// rate parses {unit | interval, requests_per_unit}. allowZero admits envoy's
// `requests_per_unit: 0` (a limit that denies everything).
func (p *fileParser) rate(m map[string]*yaml.Node, field string, at *yaml.Node, allowZero bool) (Rate, bool) {
	var r Rate
	ok := true
	unitNode, hasUnit := m["unit"]
	intervalNode, hasInterval := m["interval"]
	switch {
	case hasUnit && hasInterval:
		p.errorf(intervalNode, joinField(field, "interval"), "set either unit or interval, not both")
		ok = false
	case hasUnit:
		s, sok := p.str(unitNode, joinField(field, "unit"))
		d, known := UnitDuration(s)
		if sok && !known {
			p.errorf(unitNode, joinField(field, "unit"), "must be second, minute, hour, day, week, month or year (got %q); or use interval: <duration>", s)
		}
		ok = sok && known
		r.Interval = d
	case hasInterval:
		d, dok := p.duration(intervalNode, joinField(field, "interval"))
		ok = dok
		r.Interval = d
	default:
		p.errorf(at, joinField(field, "unit"), "required (or interval)")
		ok = false
	}
	// envoy's unit_multiplier: the window is that many units (unit: minute,
	// unit_multiplier: 5 is a five-minute window). Only with unit; at least 1.
	if mn, has := m["unit_multiplier"]; has {
		mult, mok := p.int64(mn, joinField(field, "unit_multiplier"))
		switch {
		case !mok:
			ok = false
		case !hasUnit:
			p.errorf(mn, joinField(field, "unit_multiplier"), "only applies with unit (interval is already a duration)")
			ok = false
		case mult < 1 || mult > 1<<20:
			p.errorf(mn, joinField(field, "unit_multiplier"), "must be 1 to %d (got %d)", 1<<20, mult)
			ok = false
		case r.Interval > 0 && mult > int64(math.MaxInt64/r.Interval):
			// year × 1048576 is longer than a time.Duration holds: it would wrap around
			// to a negative window.
			p.errorf(mn, joinField(field, "unit_multiplier"), "makes a window longer than %d years (got %d)", int64(math.MaxInt64/time.Duration(365*24*time.Hour)), mult)
			ok = false
		default:
			r.Interval *= time.Duration(mult)
		}
	}
	rpu, has := m["requests_per_unit"]
	if !has {
		p.errorf(at, joinField(field, "requests_per_unit"), "required")
		return r, false
	}
	n, nok := p.int64(rpu, joinField(field, "requests_per_unit"))
	switch {
	case !nok:
		ok = false
	case n < 0 || (n == 0 && !allowZero):
		min := 1
		if allowZero {
			min = 0
		}
		p.errorf(rpu, joinField(field, "requests_per_unit"), "must be ≥ %d (got %d)", min, n)
		ok = false
	default:
		r.Requests = n
	}
	return r, ok
}
