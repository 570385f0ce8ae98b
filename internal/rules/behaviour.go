package rules

import "gopkg.in/yaml.v3"

// behaviour parses overflow, park, sink, delivery and ordering, applies their defaults
// and checks how they combine.
func (p *fileParser) behaviour(m map[string]*yaml.Node, field string, item *yaml.Node, rule *Rule, isRule bool) {
	f := func(name string) string { return joinField(field, name) }
	rule.Overflow = DefaultOverflow
	rule.Park = Park{MaxAge: DefaultParkMaxAge}
	rule.Sink = Sink{Timeout: DefaultSinkTimeout}
	rule.Delivery = Delivery{MaxAttempts: DefaultMaxAttempts, MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff, MaxInFlight: 1}
	rule.Ordering = DefaultOrdering

	if !isRule {
		for _, name := range []string{"overflow", "park", "sink", "delivery", "ordering"} {
			if n, has := m[name]; has {
				p.errorf(n, f(name), "only applies to a descriptor with rate_limit or queue")
			}
		}
		return
	}

	if n, has := m["overflow"]; has {
		s, ok := p.str(n, f("overflow"))
		switch {
		case !ok:
		case Overflow(s) == OverflowReject || Overflow(s) == OverflowPark:
			rule.Overflow = Overflow(s)
		default:
			p.errorf(n, f("overflow"), "must be reject or park (got %q)", s)
		}
	}
	if n, has := m["ordering"]; has {
		s, ok := p.str(n, f("ordering"))
		switch {
		case !ok:
		case Ordering(s) == OrderingStrict || Ordering(s) == OrderingRelaxed:
			rule.Ordering = Ordering(s)
		default:
			p.errorf(n, f("ordering"), "must be strict or relaxed (got %q)", s)
		}
	}
	if n, has := m["park"]; has {
		if pm, ok := p.mapping(n, f("park"), parkFields); ok {
			if v, has := pm["max_age"]; has {
				if d, ok := p.duration(v, f("park.max_age")); ok {
					rule.Park.MaxAge = d
				}
			}
		}
		if rule.Overflow != OverflowPark {
			p.errorf(n, f("park"), "only applies with overflow: park")
		}
	}
	hasSink := false
	if n, has := m["sink"]; has {
		hasSink = true
		p.sink(n, f("sink"), &rule.Sink)
	}
	if n, has := m["delivery"]; has {
		p.delivery(n, f("delivery"), &rule.Delivery)
		if !hasSink {
			p.errorf(n, f("delivery"), "only applies to a rule with a sink")
		}
	}
	if n, has := m["ordering"]; has && !hasSink {
		p.errorf(n, f("ordering"), "only applies to a rule with a sink")
	}
	if rule.Delivery.MaxInFlight > 1 && rule.Ordering != OrderingRelaxed {
		p.errorf(m["delivery"], f("delivery.max_in_flight"), "above 1 needs ordering: relaxed (with several deliveries of a key at once, a later message may arrive first); got %d with ordering: %s", rule.Delivery.MaxInFlight, rule.Ordering)
	}
	if a := rule.Delivery.Adaptive; rule.Queue != nil && !a.MinOutflow.Zero() && a.MinOutflow.PerSecond() > rule.Queue.Outflow.PerSecond() {
		p.errorf(m["delivery"], f("delivery.adaptive.min_outflow"), "must be ≤ queue.outflow (%.6g/s > %.6g/s): adaptive outflow never goes above the configured one",
			a.MinOutflow.PerSecond(), rule.Queue.Outflow.PerSecond())
	}
	if rule.Queue != nil && !hasSink {
		p.errorf(item, f("sink"), "required for a rule with a queue (where should the drainers deliver?)")
	}
	if rule.Overflow == OverflowPark {
		switch {
		case rule.Queue == nil && len(rule.RateLimits) == 0:
			p.errorf(m["overflow"], f("overflow"), "park needs a queue or a rate_limit to wait for")
		case !hasSink && rule.Queue == nil:
			p.errorf(m["overflow"], f("overflow"), "park needs a sink to deliver re-admitted messages")
		}
	}
}
