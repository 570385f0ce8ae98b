package rules

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// descriptors parses a list of descriptors into the children of parent.
func (p *fileParser) descriptors(seqNode *yaml.Node, field, domain string, parentPath []PathEntry, parentVarying []int, parent *node) {
	seq := resolve(seqNode)
	if isNull(seq) {
		return
	}
	if seq.Kind != yaml.SequenceNode {
		p.errorf(seq, field, "must be a list of descriptors (got %s)", describe(seq))
		return
	}
	if len(parentPath) >= maxDescriptorDepth {
		p.errorf(seq, field, "descriptors nested deeper than %d levels", maxDescriptorDepth)
		return
	}
	for i, item := range seq.Content {
		p.descriptor(item, fmt.Sprintf("%s[%d]", field, i), domain, parentPath, parentVarying, parent)
	}
}

func (p *fileParser) descriptor(itemNode *yaml.Node, field, domain string, parentPath []PathEntry, parentVarying []int, parent *node) {
	item := resolve(itemNode)
	m, ok := p.mapping(item, field, descriptorFields)
	if !ok {
		return
	}
	f := func(name string) string { return joinField(field, name) }

	key, okKey := p.str(m["key"], f("key"))
	if okKey && key == "" {
		p.errorf(item, f("key"), "required (a descriptor cannot have an empty key)")
		okKey = false
	}
	value, okValue := p.str(m["value"], f("value"))
	if !okKey || !okValue {
		return
	}
	entry := PathEntry{Key: key, Value: value}
	path := append(append(make([]PathEntry, 0, len(parentPath)+1), parentPath...), entry)

	shareThreshold := false
	if n, has := m["share_threshold"]; has {
		shareThreshold, _ = p.bool(n, f("share_threshold"))
		if shareThreshold && !strings.Contains(value, wildcard) {
			p.errorf(n, f("share_threshold"), "only applies to a wildcard value (one containing '*')")
		}
	}
	if n, has := m["value_to_metric"]; has {
		p.bool(n, f("value_to_metric")) // envoy metrics tuning: validated, otherwise ignored
	}
	shadow := false
	if n, has := m["shadow_mode"]; has {
		shadow, _ = p.bool(n, f("shadow_mode"))
	}
	quota, allOrNothing, detailed := false, false, false
	if n, has := m["quota_mode"]; has {
		quota, _ = p.bool(n, f("quota_mode"))
	}
	if n, has := m["all_or_nothing"]; has {
		allOrNothing, _ = p.bool(n, f("all_or_nothing"))
	}
	if n, has := m["detailed_metric"]; has {
		detailed, _ = p.bool(n, f("detailed_metric"))
	}
	var metadata map[string]any
	if n, has := m["metadata"]; has {
		metadata = p.metadata(n, f("metadata"))
	}

	child := &node{varying: value == "" || (strings.Contains(value, wildcard) && !shareThreshold)}
	if !parent.addChild(entry, child) {
		p.errorf(item, field, "duplicate descriptor %s (an earlier sibling has the same key and value)", describeEntry(entry))
	}

	// The levels whose request value selects the bucket (see Match): no configured
	// value, or a wildcard whose matches are counted apart (envoy's default; with
	// share_threshold they share one bucket).
	varying := parentVarying
	if child.varying {
		varying = append(append(make([]int, 0, len(parentVarying)+1), parentVarying...), len(path)-1)
	}
	rule := &Rule{Domain: domain, Path: path, ShadowMode: shadow, QuotaMode: quota, AllOrNothing: allOrNothing,
		DetailedMetric: detailed, Metadata: metadata, File: p.file, Line: item.Line, varying: varying}
	hasLimit := false
	if n, has := m["rate_limit"]; has {
		hasLimit = p.rateLimits(n, f("rate_limit"), rule)
	}
	if n, has := m["queue"]; has {
		rule.Queue = p.queue(n, f("queue"))
		if rule.Queue == nil {
			rule.Queue = &Queue{} // keep "this is a queue rule" for the checks below
		}
	}
	if rule.Queue != nil {
		for _, l := range rule.RateLimits {
			if l.Rate.Requests == 0 {
				p.errorf(m["rate_limit"], f("rate_limit"), "requests_per_unit: 0 would refuse every message of a queue rule (block with a check-only rule instead)")
				break
			}
		}
	}
	if n, has := m["checks"]; has {
		s, ok := p.str(n, f("checks"))
		switch {
		case !ok:
		case rule.Queue == nil:
			// A check-only rule's counters are the checks' own: there is nothing to share.
			p.errorf(n, f("checks"), "only applies to a rule with a queue (a check-only rule's counters are its checks')")
		case Checks(s) == ChecksOwn:
			// the default, kept as "" so a rule written either way is the same rule
		case Checks(s) == ChecksShare:
			rule.Checks = ChecksShare
		default:
			p.errorf(n, f("checks"), "must be own or share (got %q)", s)
		}
	}
	if n, has := m["limit_override"]; has {
		p.limitOverride(n, f("limit_override"), &rule.LimitOverride)
		if !hasLimit && rule.Queue == nil {
			p.errorf(n, f("limit_override"), "only applies to a descriptor with rate_limit or queue")
		}
	}
	if n, has := m["response_headers"]; has {
		if on, ok := p.bool(n, f("response_headers")); ok && on && !hasLimit {
			p.errorf(n, f("response_headers"), "only applies to a descriptor with rate_limit")
		} else {
			rule.ResponseHeaders = on
		}
	}
	isRule := hasLimit || rule.Queue != nil
	if allOrNothing && !hasLimit {
		p.errorf(m["all_or_nothing"], f("all_or_nothing"), "only applies to a descriptor with rate_limit")
	}
	if n, has := m["name"]; has {
		name, ok := p.str(n, f("name"))
		switch {
		case !ok:
		case !isRule:
			p.errorf(n, f("name"), "only applies to a descriptor with rate_limit or queue")
		case name == "":
			p.errorf(n, f("name"), "must not be empty")
		case !validName.MatchString(name) || len(name) > MaxNameLen:
			p.errorf(n, f("name"), "must be 1–%d characters of %s (got %q): it is used in NATS stream names, metrics and URLs",
				MaxNameLen, allowedNameCharsPretty, name)
		default:
			rule.Name = name
		}
	}
	p.behaviour(m, field, item, rule, isRule)

	if isRule {
		p.b.addRule(p, rule, item, field, child)
	}
	if n, has := m["descriptors"]; has {
		p.descriptors(n, f("descriptors"), domain, path, varying, child)
	}
}

func describeEntry(e PathEntry) string {
	if e.Value == "" {
		return fmt.Sprintf("key=%q", e.Key)
	}
	return fmt.Sprintf("key=%q value=%q", e.Key, e.Value)
}

// limitOverride parses `limit_override: {max_factor, max_window}`.
func (p *fileParser) limitOverride(n *yaml.Node, field string, lo *LimitOverride) {
	m, ok := p.mapping(n, field, overrideFields)
	if !ok {
		return
	}
	if v, has := m["max_factor"]; has {
		if f, ok := p.intIn(v, joinField(field, "max_factor"), 0, MaxOverrideFactor); ok {
			lo.MaxFactor, lo.Refused = int64(f), f == 0
		}
	}
	if v, has := m["max_window"]; has {
		if d, ok := p.duration(v, joinField(field, "max_window")); ok {
			if d > MaxOverrideWindow {
				p.errorf(v, joinField(field, "max_window"), "must be at most %s (a year; got %s)", MaxOverrideWindow, d)
			} else {
				lo.MaxWindow = d
			}
		}
	}
}
