package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults applied to every rule (docs/rules.md "Defaults").
const (
	DefaultAlgorithm   = FixedWindow
	DefaultOverflow    = OverflowReject
	DefaultOrdering    = OrderingStrict
	DefaultParkMaxAge  = 24 * time.Hour
	DefaultSinkTimeout = 10 * time.Second
	DefaultMaxAttempts = 8
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultSpacing     = SpacingGCRA
	// delivery.adaptive's defaults (internal/adaptive's, which a test checks).
	DefaultAdaptiveDecrease          = 0.5
	DefaultAdaptiveIncreasePerSecond = 0.05
	// sink.breaker's defaults (internal/breaker's, which a test checks).
	DefaultBreakerFailures    = 10
	DefaultBreakerMinKeys     = 3
	DefaultBreakerWithin      = 10 * time.Second
	DefaultBreakerCoolDown    = 5 * time.Second
	DefaultBreakerMaxCoolDown = 5 * time.Minute
	MaxNameLen                = 128
	maxNodesPerDocument       = 100_000 // alias expansion guard ("billion laughs")
	maxDescriptorDepth        = 32
	yamlMergeKey              = "<<"
	wildcard                  = "*"
	allowedNameCharsPretty    = "[A-Za-z0-9_-]"
)

// validName is what an explicit `name:` must look like, and what a default name is
// sanitised to. The name is used verbatim in NATS stream names (which may not contain
// '.', '*', '>', whitespace or path separators), in Redis hash tags, in Prometheus label
// values and in admin URL path segments; this alphabet needs no escaping in any of them.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Allowed fields per YAML object. Anything else is an error: a typo must not silently
// turn a limit off. envoy's own fields are all here, including the ones that only tune
// envoy's metrics (detailed_metric, value_to_metric), which are accepted and ignored.
var (
	documentFields   = []string{"domain", "descriptors"}
	descriptorFields = []string{
		"key", "value", "descriptors", "rate_limit", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "name", "queue", "overflow", "park", "sink",
		"delivery", "ordering", "response_headers", "metadata", "quota_mode", "all_or_nothing",
		"checks", "limit_override",
	}
	envoyLimitFields = []string{
		"unit", "interval", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "unit_multiplier", "time_zone",
	}
	listLimitFields = []string{"unit", "interval", "requests_per_unit", "name", "algorithm", "burst", "unit_multiplier", "time_zone"}
	rateFields      = []string{"unit", "interval", "requests_per_unit"}
	queueFields     = []string{"capacity", "outflow", "total_outflow", "max_scheduled", "max_age", "max_bytes", "partitions"}
	parkFields      = []string{"max_age"}
	sinkFields      = []string{"url", "nats_subject", "timeout", "sign_keys", "sign_scheme", "max_in_flight", "breaker"}
	deliveryFields  = []string{"max_attempts", "min_backoff", "max_backoff", "max_in_flight", "window", "spacing", "adaptive"}
	windowFields    = []string{"days", "from", "to", "time_zone", "default_time_zone"}
	adaptiveFields  = []string{"enabled", "decrease", "increase_per_second", "min_outflow"}
	breakerFields   = []string{"enabled", "failures", "min_keys", "within", "cool_down", "max_cool_down"}
	replacesFields  = []string{"name"}
	overrideFields  = []string{"max_factor", "max_window"}
)

// builder turns YAML sources into a Set, collecting every problem on the way.
type builder struct {
	set      *Set
	errs     ValidationErrors
	dropped  int
	fileIdx  map[string]int
	domainAt map[string]string // domain → "file:line" of its first document
	nameAt   map[string]*Rule
	opts     Options
}

func build(srcs []source, opts Options) (*Set, error) {
	b := &builder{
		opts:     opts,
		set:      &Set{domains: map[string]*node{}, byName: map[string]*Rule{}},
		fileIdx:  map[string]int{},
		domainAt: map[string]string{},
		nameAt:   map[string]*Rule{},
	}
	for i, s := range srcs {
		b.fileIdx[s.name] = i
		b.set.files = append(b.set.files, s.name)
		b.parseFile(s.name, s.data)
	}
	if len(b.errs) > 0 || b.dropped > 0 {
		sort.SliceStable(b.errs, func(i, j int) bool {
			fi, fj := b.fileIdx[b.errs[i].File], b.fileIdx[b.errs[j].File]
			if fi != fj {
				return fi < fj
			}
			return b.errs[i].Line < b.errs[j].Line
		})
		errs := b.errs
		if b.dropped > 0 {
			last := errs[len(errs)-1]
			errs = append(errs, &ValidationError{File: last.File,
				Message: fmt.Sprintf("too many errors (%d more not shown)", b.dropped)})
		}
		return nil, fmt.Errorf("rules: %w", errs)
	}
	return b.set, nil
}

func (b *builder) add(e *ValidationError) {
	if len(b.errs) >= MaxErrors {
		b.dropped++
		return
	}
	b.errs = append(b.errs, e)
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func (b *builder) parseFile(name string, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	p := &fileParser{b: b, file: name}
	for doc := 0; ; doc++ {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			line := 0
			if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
				fmt.Sscanf(m[1], "%d", &line)
				msg = strings.TrimPrefix(msg, m[0]+": ")
			}
			b.add(&ValidationError{File: name, Line: line, Message: "invalid YAML: " + msg})
			return // the decoder cannot resynchronise after a syntax error
		}
		p.document(&root)
	}
}

// document parses one `domain:` + `descriptors:` document.
func (p *fileParser) document(doc *yaml.Node) {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return
		}
		doc = doc.Content[0]
	}
	if isNull(resolve(doc)) {
		return // an empty document, e.g. a trailing "---"
	}
	if countNodes(doc, maxNodesPerDocument) > maxNodesPerDocument {
		p.errorf(doc, "", "document too large or too deeply aliased (more than %d nodes)", maxNodesPerDocument)
		return
	}
	m, ok := p.mapping(doc, "", documentFields)
	if !ok {
		return
	}
	domainNode := m["domain"]
	domain, ok := p.str(domainNode, "domain")
	if !ok {
		return
	}
	if domain == "" {
		at := domainNode
		if at == nil {
			at = resolve(doc)
		}
		p.errorf(at, "domain", "required (a document cannot have an empty domain)")
		return
	}
	where := fmt.Sprintf("%s:%d", p.file, domainNode.Line)
	root := p.b.set.domains[domain]
	if first, dup := p.b.domainAt[domain]; dup && !p.b.opts.MergeDomains {
		// envoyproxy/ratelimit refuses a domain defined twice unless its
		// MERGE_DOMAIN_CONFIG is set; so do we, unless -merge-domain-config.
		p.errorf(domainNode, "domain", "duplicate domain %q (first defined at %s; -merge-domain-config merges them)", domain, first)
		return
	}
	if root == nil {
		p.b.domainAt[domain] = where
		root = &node{}
		p.b.set.domains[domain] = root
		p.b.set.domainOrder = append(p.b.set.domainOrder, domain)
	}
	if d, has := m["descriptors"]; has {
		p.descriptors(d, "descriptors", domain, nil, nil, root)
	}
}

// defaultName derives a rule name from its domain and path: the domain, then each
// level's key and (when set) value, joined by '_', with every character outside
// [A-Za-z0-9_-] replaced by '_' — e.g. orders / merchant_id → "orders_merchant_id".
//
// Why not "orders.merchant_id": the name is used verbatim as (part of) a NATS stream
// name, a Redis hash tag, a Prometheus label value and an admin URL segment, and '.'
// (subject separator), '*' and '>' (NATS wildcards), spaces and '/' all break one of
// those. Sanitising can make two paths collide (value "a.b" vs "a_b"); names must be
// unique, so that is reported and the fix is an explicit `name:`.
func defaultName(domain string, path []PathEntry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range path {
		b.WriteByte('_')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return sanitizeName(b.String())
}

func sanitizeName(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			out[i] = '_'
		}
	}
	return string(out)
}

// addRule names the rule, checks its name is unique and hooks it into the tree.
func (b *builder) addRule(p *fileParser, r *Rule, item *yaml.Node, field string, n *node) {
	if r.Name == "" {
		r.Name = defaultName(r.Domain, r.Path)
		if len(r.Name) > MaxNameLen {
			p.errorf(item, joinField(field, "name"), "the default name %.40q… is longer than %d characters; set name explicitly", r.Name, MaxNameLen)
		}
	}
	if first, dup := b.nameAt[r.Name]; dup {
		p.errorf(item, joinField(field, "name"), "name %q is already used by the rule at %s:%d; rule names must be unique (set name explicitly)",
			r.Name, first.File, first.Line)
	} else {
		b.nameAt[r.Name] = r
	}
	for _, rep := range r.Replaces {
		if rep == r.Name {
			p.errorf(item, joinField(field, "rate_limit.replaces"), "must not name the rule itself (%q)", rep)
		}
	}
	n.rule = r
	b.set.rules = append(b.set.rules, r)
	b.set.byName[r.Name] = r
}
