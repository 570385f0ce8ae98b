package rules

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/internal/window"
)

// This file parses the per-key steering options the drain engine applies:
// delivery.window, delivery.spacing, delivery.adaptive and sink.breaker.

// window reads delivery.window: {days, from, to, time_zone, default_time_zone}.
func (p *fileParser) window(n *yaml.Node, field string) window.Window {
	m, ok := p.mapping(n, field, windowFields)
	if !ok {
		return window.Window{}
	}
	at := resolve(n)
	w := window.Window{Set: true}
	good := true
	if v, has := m["days"]; has {
		f := joinField(field, "days")
		v = resolve(v)
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			p.errorf(v, f, "must be a list of days such as [mon-fri] or [sat, sun] (got %s)", describe(v))
			good = false
		} else {
			for i, item := range v.Content {
				s, ok := p.str(item, fmt.Sprintf("%s[%d]", f, i))
				if !ok {
					good = false
					continue
				}
				d, err := window.ParseDays([]string{s})
				if err != nil {
					p.errorf(resolve(item), fmt.Sprintf("%s[%d]", f, i), "%v", err)
					good = false
					continue
				}
				w.Days |= d
			}
		}
	}
	clock := func(name string) (d int64, ok bool) {
		v, has := m[name]
		if !has {
			p.errorf(at, joinField(field, name), "required: a time of day such as 08:00")
			return 0, false
		}
		s, ok := p.str(v, joinField(field, name))
		if !ok {
			return 0, false
		}
		c, err := window.ParseClock(s)
		if err != nil {
			p.errorf(resolve(v), joinField(field, name), "%v", err)
			return 0, false
		}
		return int64(c), true
	}
	from, okF := clock("from")
	to, okT := clock("to")
	switch {
	case !okF || !okT:
		good = false
	case from == to:
		p.errorf(resolve(m["to"]), joinField(field, "to"), "must differ from from (a window of no time, or of the whole day: leave delivery.window out)")
		good = false
	case from == int64(24*60*60*1e9):
		p.errorf(resolve(m["from"]), joinField(field, "from"), "must be before 24:00")
		good = false
	}
	w.From, w.To = durationOf(from), durationOf(to)
	zoneOf := func(name string) (*yaml.Node, string, bool) {
		v, has := m[name]
		if !has {
			return nil, "", false
		}
		s, ok := p.str(v, joinField(field, name))
		return resolve(v), s, ok
	}
	if v, name, ok := zoneOf("time_zone"); v == nil {
		p.errorf(at, joinField(field, "time_zone"), "required: an IANA zone such as Asia/Seoul, UTC, or from_message (each message's time_zone)")
		good = false
	} else if ok && name == "from_message" {
		w.FromMessage = true
	} else if ok {
		loc, err := window.LoadZone(name)
		if err != nil {
			p.errorf(v, joinField(field, "time_zone"), "unknown time zone %q: %v, or from_message", name, err)
			good = false
		}
		w.Zone = loc
	} else {
		good = false
	}
	if v, name, ok := zoneOf("default_time_zone"); v != nil {
		switch {
		case !w.FromMessage:
			p.errorf(v, joinField(field, "default_time_zone"), "only applies with time_zone: from_message")
			good = false
		case ok:
			loc, err := window.LoadZone(name)
			if err != nil {
				p.errorf(v, joinField(field, "default_time_zone"), "unknown time zone %q: %v", name, err)
				good = false
			}
			w.Zone = loc
		}
	}
	if !good {
		return window.Window{}
	}
	return w
}

func durationOf(nanos int64) time.Duration { return time.Duration(nanos) }

// spacing reads delivery.spacing.
func (p *fileParser) spacing(n *yaml.Node, field string) Spacing {
	s, ok := p.str(n, field)
	switch {
	case !ok:
	case Spacing(s) == SpacingGCRA || Spacing(s) == SpacingStrict:
		return Spacing(s)
	default:
		p.errorf(resolve(n), field, "must be gcra or strict (got %q)", s)
	}
	return DefaultSpacing
}

// adaptive reads delivery.adaptive; present, it is enabled unless enabled: false.
func (p *fileParser) adaptive(n *yaml.Node, field string) Adaptive {
	a := Adaptive{Enabled: true, Decrease: DefaultAdaptiveDecrease, IncreasePerSecond: DefaultAdaptiveIncreasePerSecond}
	m, ok := p.mapping(n, field, adaptiveFields)
	if !ok {
		return Adaptive{}
	}
	if v, has := m["enabled"]; has {
		if b, ok := p.bool(v, joinField(field, "enabled")); ok {
			a.Enabled = b
		}
	}
	if v, has := m["decrease"]; has {
		if f, ok := p.float(v, joinField(field, "decrease")); ok {
			if f <= 0 || f >= 1 {
				p.errorf(resolve(v), joinField(field, "decrease"), "must be between 0 and 1, exclusive (got %g): the factor a throttled key's outflow is multiplied by", f)
			} else {
				a.Decrease = f
			}
		}
	}
	if v, has := m["increase_per_second"]; has {
		if f, ok := p.float(v, joinField(field, "increase_per_second")); ok {
			if f <= 0 || f > 1 {
				p.errorf(resolve(v), joinField(field, "increase_per_second"), "must be > 0 and ≤ 1 (got %g): the share of the outflow given back per second of successes", f)
			} else {
				a.IncreasePerSecond = f
			}
		}
	}
	if v, has := m["min_outflow"]; has {
		if rm, ok := p.mapping(v, joinField(field, "min_outflow"), rateFields); ok {
			a.MinOutflow, _ = p.rate(rm, joinField(field, "min_outflow"), resolve(v), false)
		}
	}
	return a
}

// breaker reads sink.breaker; present, it is enabled unless enabled: false.
func (p *fileParser) breaker(n *yaml.Node, field string) Breaker {
	b := Breaker{Enabled: true, Failures: DefaultBreakerFailures, MinKeys: DefaultBreakerMinKeys,
		Within: DefaultBreakerWithin, CoolDown: DefaultBreakerCoolDown, MaxCoolDown: DefaultBreakerMaxCoolDown}
	m, ok := p.mapping(n, field, breakerFields)
	if !ok {
		return Breaker{}
	}
	if v, has := m["enabled"]; has {
		if e, ok := p.bool(v, joinField(field, "enabled")); ok {
			b.Enabled = e
		}
	}
	if v, has := m["failures"]; has {
		if i, ok := p.intIn(v, joinField(field, "failures"), 1, 10_000); ok {
			b.Failures = i
		}
	}
	if v, has := m["min_keys"]; has {
		if i, ok := p.intIn(v, joinField(field, "min_keys"), 1, 10_000); ok {
			b.MinKeys = i
		}
	}
	if b.MinKeys > b.Failures {
		at := m["min_keys"]
		if at == nil {
			at = m["failures"]
		}
		p.errorf(resolve(at), joinField(field, "min_keys"), "must be ≤ failures (%d > %d): the failures must span that many keys", b.MinKeys, b.Failures)
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"within", &b.Within}, {"cool_down", &b.CoolDown}, {"max_cool_down", &b.MaxCoolDown}} {
		if v, has := m[d.name]; has {
			if x, ok := p.duration(v, joinField(field, d.name)); ok {
				*d.dst = x
			}
		}
	}
	if b.MaxCoolDown < b.CoolDown {
		at := m["max_cool_down"]
		if at == nil {
			at = m["cool_down"]
		}
		p.errorf(resolve(at), joinField(field, "max_cool_down"), "must be ≥ cool_down (%s < %s)", b.MaxCoolDown, b.CoolDown)
	}
	return b
}

// float reads a finite number (0.5, 1, 1e-2).
func (p *fileParser) float(n *yaml.Node, field string) (float64, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
		p.errorf(n, field, "must be a number (got %s)", describe(n))
		return 0, false
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		p.errorf(n, field, "must be a finite number (got %q)", n.Value)
		return 0, false
	}
	return f, true
}
