package rules

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

var natsSubjectToken = regexp.MustCompile(`^[^\s.*>]+$`)

func (p *fileParser) sink(n *yaml.Node, field string, s *Sink) {
	m, ok := p.mapping(n, field, sinkFields)
	if !ok {
		return
	}
	uNode, hasURL := m["url"]
	sNode, hasSubject := m["nats_subject"]
	switch {
	case hasURL && hasSubject:
		p.errorf(sNode, joinField(field, "nats_subject"), "set either url or nats_subject, not both")
	case hasURL:
		raw, ok := p.str(uNode, joinField(field, "url"))
		if !ok {
			break
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.errorf(uNode, joinField(field, "url"), "must be an absolute http:// or https:// URL (got %q)", raw)
			break
		}
		s.URL = raw
	case hasSubject:
		subj, ok := p.str(sNode, joinField(field, "nats_subject"))
		if !ok {
			break
		}
		valid := subj != ""
		for _, tok := range strings.Split(subj, ".") {
			valid = valid && natsSubjectToken.MatchString(tok)
		}
		if !valid {
			p.errorf(sNode, joinField(field, "nats_subject"),
				"must be a NATS subject without wildcards or spaces, like orders.accepted (got %q)", subj)
			break
		}
		s.NATSSubject = subj
	default:
		p.errorf(resolve(n), field, "needs url or nats_subject")
	}
	if v, has := m["timeout"]; has {
		if d, ok := p.duration(v, joinField(field, "timeout")); ok {
			s.Timeout = d
		}
	}
	if v, has := m["sign_keys"]; has {
		s.SignKeys = strings.Join(p.signKeys(v, joinField(field, "sign_keys"), hasSubject), ",")
	}
	if v, has := m["sign_scheme"]; has {
		f := joinField(field, "sign_scheme")
		if scheme, ok := p.str(v, f); ok {
			switch {
			case hasSubject:
				p.errorf(v, f, "lays out the signature of HTTP deliveries; a nats_subject sink has none")
			case scheme != "sluice" && scheme != "standard-webhooks":
				p.errorf(v, f, "must be sluice or standard-webhooks (got %q)", scheme)
			default:
				s.SignScheme = scheme
			}
		}
	}
	if v, has := m["max_in_flight"]; has {
		if a, ok := p.intIn(v, joinField(field, "max_in_flight"), 1, 100_000); ok {
			s.MaxInFlight = a
		}
	}
	if v, has := m["breaker"]; has {
		s.Breaker = p.breaker(v, joinField(field, "breaker"))
	}
}

// signKeys parses sink.sign_keys: a non-empty list of key file paths (HTTP sinks only).
func (p *fileParser) signKeys(n *yaml.Node, field string, natsSink bool) []string {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.errorf(n, field, "must be a list of key file paths, the signing key first (got %s)", describe(n))
		return nil
	}
	if natsSink {
		p.errorf(n, field, "signs HTTP deliveries only; a nats_subject sink cannot have it")
		return nil
	}
	var out []string
	for i, item := range n.Content {
		path, ok := p.str(item, fmt.Sprintf("%s[%d]", field, i))
		if ok && (path == "" || strings.Contains(path, ",")) {
			p.errorf(resolve(item), fmt.Sprintf("%s[%d]", field, i), "must be a file path, not empty and without commas (got %q)", path)
			continue
		}
		if ok {
			out = append(out, path)
		}
	}
	return out
}

func (p *fileParser) delivery(n *yaml.Node, field string, d *Delivery) {
	m, ok := p.mapping(n, field, deliveryFields)
	if !ok {
		return
	}
	if v, has := m["max_attempts"]; has {
		if a, ok := p.intIn(v, joinField(field, "max_attempts"), 1, 1_000_000); ok {
			d.MaxAttempts = a
		}
	}
	if v, has := m["min_backoff"]; has {
		if b, ok := p.duration(v, joinField(field, "min_backoff")); ok {
			d.MinBackoff = b
		}
	}
	if v, has := m["max_backoff"]; has {
		if b, ok := p.duration(v, joinField(field, "max_backoff")); ok {
			d.MaxBackoff = b
		}
	}
	if v, has := m["max_in_flight"]; has {
		if a, ok := p.intIn(v, joinField(field, "max_in_flight"), 1, 1000); ok {
			d.MaxInFlight = a
		}
	}
	if v, has := m["window"]; has {
		d.Window = p.window(v, joinField(field, "window"))
	}
	if v, has := m["spacing"]; has {
		d.Spacing = p.spacing(v, joinField(field, "spacing"))
	}
	if v, has := m["adaptive"]; has {
		d.Adaptive = p.adaptive(v, joinField(field, "adaptive"))
	}
	if d.MaxBackoff < d.MinBackoff {
		at := m["max_backoff"]
		if at == nil {
			at = m["min_backoff"]
		}
		p.errorf(at, joinField(field, "max_backoff"), "must be ≥ min_backoff (%s < %s)", d.MaxBackoff, d.MinBackoff)
	}
}
