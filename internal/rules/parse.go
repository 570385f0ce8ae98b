package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults applied to every rule (API.md "Rules file").
const (
	DefaultAlgorithm       = FixedWindow
	DefaultOverflow        = OverflowReject
	DefaultOrdering        = OrderingStrict
	DefaultParkMaxAge      = 24 * time.Hour
	DefaultSinkTimeout     = 10 * time.Second
	DefaultMaxAttempts     = 8
	DefaultMinBackoff      = time.Second
	DefaultMaxBackoff      = 5 * time.Minute
	MaxNameLen             = 128
	maxNodesPerDocument    = 100_000 // alias expansion guard ("billion laughs")
	maxDescriptorDepth     = 32
	yamlMergeKey           = "<<"
	wildcard               = "*"
	allowedNameCharsPretty = "[A-Za-z0-9_-]"
)

// validName is what an explicit `name:` must look like, and what a default name is
// sanitised to. The name is used verbatim in NATS stream names (which may not contain
// '.', '*', '>', whitespace or path separators), in Redis hash tags, in Prometheus label
// values and in admin URL path segments; this alphabet needs no escaping in any of them.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// units are envoy's rate-limit units (case-insensitive, as envoy upper-cases them),
// with envoy's fixed lengths for month (30 days) and year (365 days).
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

var algorithms = map[Algorithm]bool{
	TokenBucket: true, LeakyBucket: true, FixedWindow: true,
	SlidingWindowLog: true, SlidingWindowCounter: true,
}

// Allowed fields per YAML object. Anything else is an error: a typo must not silently
// turn a limit off. envoy's own fields are all here, including the ones that only tune
// envoy's metrics (detailed_metric, value_to_metric), which are accepted and ignored.
var (
	documentFields   = []string{"domain", "descriptors"}
	descriptorFields = []string{
		"key", "value", "descriptors", "rate_limit", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "name", "queue", "overflow", "park", "sink",
		"delivery", "ordering", "response_headers", "metadata", "quota_mode", "all_or_nothing",
	}
	envoyLimitFields = []string{
		"unit", "interval", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "unit_multiplier", "time_zone",
	}
	listLimitFields = []string{"unit", "interval", "requests_per_unit", "name", "algorithm", "burst", "unit_multiplier", "time_zone"}
	rateFields      = []string{"unit", "interval", "requests_per_unit"}
	queueFields     = []string{"capacity", "outflow", "total_outflow", "max_scheduled", "max_age", "partitions"}
	parkFields      = []string{"max_age"}
	sinkFields      = []string{"url", "nats_subject", "timeout", "sign_keys"}
	deliveryFields  = []string{"max_attempts", "min_backoff", "max_backoff", "max_in_flight"}
	replacesFields  = []string{"name"}
)

// Parse reads one rules file's contents (one or more YAML documents) into a Set.
// name is used in error messages only. It is Load for a single in-memory file.
func Parse(name string, data []byte) (*Set, error) {
	return build([]source{{name: name, data: data}}, Options{})
}

// Options change how rules files are combined. The zero value is the default.
type Options struct {
	// MergeDomains lets several documents (in one file or several) define one domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: their descriptors are merged into
	// one tree, in load order; a descriptor defined twice (same key and value at the
	// same place) is still an error. Default false: a domain defined twice is refused.
	MergeDomains bool
}

// LoadWith is Load with options.
func LoadWith(o Options, paths ...string) (*Set, error) {
	srcs, err := readSources(paths)
	if err != nil {
		return nil, err
	}
	return build(srcs, o)
}

// Load reads rules from files and directories and returns the validated Set.
//
// A directory contributes its *.yaml and *.yml files in name order (not recursively;
// names starting with '.' are skipped, which also skips Kubernetes ConfigMap
// "..data" bookkeeping entries). Every file may hold several YAML documents separated
// by "---", each one `domain:` plus `descriptors:` as in envoyproxy/ratelimit.
//
// Every problem found (up to MaxErrors) is reported at once as ValidationErrors,
// each naming file, line and field.
func Load(paths ...string) (*Set, error) {
	return LoadWith(Options{}, paths...)
}

type source struct {
	name string
	data []byte
}

// resolveFiles expands paths into the ordered list of rules files.
func resolveFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		for _, e := range entries { // ReadDir sorts by name
			n := e.Name()
			if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			full := filepath.Join(p, n)
			// Follow symlinks (ConfigMap files are symlinks) but skip directories.
			if st, err := os.Stat(full); err != nil || st.IsDir() {
				continue
			}
			files = append(files, full)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoRulesFiles, strings.Join(paths, ", "))
	}
	return files, nil
}

func readSources(paths []string) ([]source, error) {
	files, err := resolveFiles(paths)
	if err != nil {
		return nil, err
	}
	srcs := make([]source, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		srcs = append(srcs, source{name: f, data: data})
	}
	return srcs, nil
}

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

// fileParser walks the yaml.Node tree of one file.
type fileParser struct {
	b    *builder
	file string
}

func (p *fileParser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.b.add(&ValidationError{File: p.file, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// resolve follows aliases (*name) to the anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// countNodes counts nodes with aliases expanded, stopping at limit, so that a
// small file that expands exponentially is refused before it is walked.
func countNodes(n *yaml.Node, limit int) int {
	count := 0
	var walk func(*yaml.Node, int)
	walk = func(n *yaml.Node, depth int) {
		if n == nil || count > limit {
			return
		}
		count++
		if depth > 10_000 {
			count = limit + 1
			return
		}
		if n.Kind == yaml.AliasNode {
			walk(n.Alias, depth+1)
			return
		}
		for _, c := range n.Content {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return count
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// mapping checks that n is a mapping with only allowed, unique, string keys and returns
// its values by key. Problems are reported; ok is false when n is not a mapping at all.
func (p *fileParser) mapping(n *yaml.Node, field string, allowed []string) (map[string]*yaml.Node, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		p.errorf(n, field, "must be a mapping (got %s)", describe(n))
		return nil, false
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			p.errorf(n.Content[i], field, "keys must be strings")
			continue
		}
		sub := joinField(field, k.Value)
		if k.Value == yamlMergeKey && k.Tag == "!!merge" {
			p.errorf(k, sub, "YAML merge keys (<<) are not supported; write the fields out")
			continue
		}
		if !contains(allowed, k.Value) {
			msg := "unknown field"
			if s := suggest(k.Value, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += fmt.Sprintf(" (allowed: %s)", strings.Join(allowed, ", "))
			}
			p.errorf(k, sub, "%s", msg)
			continue
		}
		if _, dup := m[k.Value]; dup {
			p.errorf(k, sub, "duplicate field")
			continue
		}
		m[k.Value] = v
	}
	return m, true
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported node"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the allowed field closest to s when it is plausibly a typo.
func suggest(s string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(s), a); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Scalar readers. Each reports its own problem and returns ok=false.

func (p *fileParser) str(n *yaml.Node, field string) (string, bool) {
	n = resolve(n)
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, field, "must be a string (got %s)", describe(n))
		return "", false
	}
	return n.Value, true
}

func (p *fileParser) int64(n *yaml.Node, field string) (int64, bool) {
	n = resolve(n)
	var v int64
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, field, "must be an integer (got %s)", describe(n))
		return 0, false
	}
	return v, true
}

func (p *fileParser) bool(n *yaml.Node, field string) (bool, bool) {
	n = resolve(n)
	var v bool
	if n == nil || n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		p.errorf(n, field, "must be true or false (got %s)", describe(n))
		return false, false
	}
	return v, true
}

func (p *fileParser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		p.errorf(n, field, "must be a duration like 30s, 5m or 24h (got %s)", describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.errorf(n, field, "must be a duration like 30s, 5m or 24h (got %q)", n.Value)
		return 0, false
	}
	if d <= 0 {
		p.errorf(n, field, "must be > 0 (got %s)", n.Value)
		return 0, false
	}
	return d, true
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
	return l, ok
}

// locations keeps every zone loaded, by name, so a reload hands the limiter the same
// *time.Location (and does not read the tz database again). There are a few hundred.
var locations sync.Map // string → *time.Location

func loadLocation(name string) (*time.Location, error) {
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	l2, _ := locations.LoadOrStore(name, l)
	return l2.(*time.Location), nil
}

// timeZone reads `time_zone`: an IANA zone name for a fixed window that divides a day.
// The other algorithms have no window edges for a zone to move: a bucket refills and a
// sliding window slides the same in every zone; the sliding window counter's windows
// weigh each other by their common length, which days of 23 and 25 hours do not have.
func (p *fileParser) timeZone(n *yaml.Node, field string, l RateLimit) (*time.Location, bool) {
	name, ok := p.str(n, field)
	if !ok {
		return nil, false
	}
	if name == "" || name == "Local" {
		p.errorf(n, field, "must be an IANA time zone name such as Asia/Seoul or UTC (got %q)", name)
		return nil, false
	}
	loc, err := loadLocation(name)
	if err != nil || strings.HasPrefix(name, "/") {
		p.errorf(n, field, "unknown time zone %q (an IANA name such as Asia/Seoul, America/New_York or UTC)", name)
		return nil, false
	}
	switch {
	case l.Algorithm != FixedWindow:
		p.errorf(n, field, "only applies to fixed_window (algorithm is %s: it has no window edges for a time zone to move)", l.Algorithm)
		return nil, false
	case l.Rate.Interval > 0 && (24*time.Hour)%l.Rate.Interval != 0:
		p.errorf(n, field, "needs a window that divides a day (an hour, 6h, a day…; got %s)", l.Rate.Interval)
		return nil, false
	}
	return loc, true
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
		d, known := units[strings.ToLower(s)]
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

func (p *fileParser) queue(n *yaml.Node, field string) *Queue {
	m, ok := p.mapping(n, field, queueFields)
	if !ok {
		return nil
	}
	at := resolve(n)
	q := &Queue{}
	if v, has := m["capacity"]; !has {
		p.errorf(at, joinField(field, "capacity"), "required")
	} else if c, ok := p.int64(v, joinField(field, "capacity")); ok {
		if c < 1 {
			p.errorf(v, joinField(field, "capacity"), "must be ≥ 1 (got %d)", c)
		}
		q.Capacity = c
	}
	if v, has := m["outflow"]; !has {
		p.errorf(at, joinField(field, "outflow"), "required")
	} else if rm, ok := p.mapping(v, joinField(field, "outflow"), rateFields); ok {
		q.Outflow, _ = p.rate(rm, joinField(field, "outflow"), resolve(v), false)
	}
	if v, has := m["total_outflow"]; has {
		if rm, ok := p.mapping(v, joinField(field, "total_outflow"), rateFields); ok {
			t, tok := p.rate(rm, joinField(field, "total_outflow"), resolve(v), false)
			if tok && !q.Outflow.Zero() && t.PerSecond() < q.Outflow.PerSecond() {
				p.errorf(v, joinField(field, "total_outflow"),
					"must be ≥ outflow (%.6g/s < %.6g/s): the whole rule cannot drain slower than one key",
					t.PerSecond(), q.Outflow.PerSecond())
			}
			q.TotalOutflow = t
		}
	}
	if v, has := m["max_age"]; has {
		if d, ok := p.duration(v, joinField(field, "max_age")); ok {
			if d <= 0 {
				p.errorf(v, joinField(field, "max_age"), "must be a positive duration (got %s)", d)
			}
			q.MaxAge = d
		}
	}
	if v, has := m["partitions"]; has {
		if c, ok := p.int64(v, joinField(field, "partitions")); ok {
			if c < 1 || c > MaxPartitions {
				p.errorf(v, joinField(field, "partitions"), "must be 1 to %d (got %d)", MaxPartitions, c)
			}
			q.Partitions = int(c)
		}
	}
	q.MaxScheduled = q.Capacity // default: as many waiting for their time as waiting in the queue
	if v, has := m["max_scheduled"]; has {
		if c, ok := p.int64(v, joinField(field, "max_scheduled")); ok {
			if c < 0 {
				p.errorf(v, joinField(field, "max_scheduled"), "must be ≥ 0 (got %d; 0 refuses scheduled messages)", c)
			}
			q.MaxScheduled = c
		}
	}
	return q
}

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
		if a, ok := p.int64(v, joinField(field, "max_attempts")); ok {
			if a < 1 || a > 1_000_000 {
				p.errorf(v, joinField(field, "max_attempts"), "must be between 1 and 1000000 (got %d)", a)
			} else {
				d.MaxAttempts = int(a)
			}
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
		if a, ok := p.int64(v, joinField(field, "max_in_flight")); ok {
			if a < 1 || a > 1000 {
				p.errorf(v, joinField(field, "max_in_flight"), "must be between 1 and 1000 (got %d)", a)
			} else {
				d.MaxInFlight = int(a)
			}
		}
	}
	if d.MaxBackoff < d.MinBackoff {
		at := m["max_backoff"]
		if at == nil {
			at = m["min_backoff"]
		}
		p.errorf(at, joinField(field, "max_backoff"), "must be ≥ min_backoff (%s < %s)", d.MaxBackoff, d.MinBackoff)
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

// metadata reads envoy's descriptor `metadata`: any mapping, kept as JSON-compatible
// values (map[string]any, []any, string, int64, float64, bool, nil) so it can travel
// in a gRPC answer's dynamic_metadata (a protobuf Struct) and in JSON. Keys are taken
// as their text (envoy does the same); a scalar YAML cannot express in JSON (.nan,
// .inf) is refused, naming the field.
func (p *fileParser) metadata(n *yaml.Node, field string) map[string]any {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "must be a mapping (got %s)", describe(n))
		return nil
	}
	v, ok := p.metaValue(n, field, 0)
	if !ok {
		return nil
	}
	return v.(map[string]any)
}

func (p *fileParser) metaValue(n *yaml.Node, field string, depth int) (any, bool) {
	n = resolve(n)
	if depth > maxDescriptorDepth {
		p.errorf(n, field, "nested deeper than %d levels", maxDescriptorDepth)
		return nil, false
	}
	switch {
	case isNull(n):
		return nil, true
	case n.Kind == yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				p.errorf(n.Content[i], field, "keys must be scalars")
				ok = false
				continue
			}
			v, vok := p.metaValue(n.Content[i+1], joinField(field, k.Value), depth+1)
			ok = ok && vok
			out[k.Value] = v
		}
		return out, ok
	case n.Kind == yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		ok := true
		for i, c := range n.Content {
			v, vok := p.metaValue(c, fmt.Sprintf("%s[%d]", field, i), depth+1)
			ok = ok && vok
			out = append(out, v)
		}
		return out, ok
	case n.Kind == yaml.ScalarNode:
		switch n.Tag {
		case "!!int":
			var v int64
			if n.Decode(&v) == nil {
				return v, true
			}
			var f float64 // beyond int64: a number all the same
			if n.Decode(&f) == nil {
				return f, true
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f, true
			}
			p.errorf(n, field, "must be a finite number (got %q)", n.Value)
			return nil, false
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		}
		return n.Value, true
	}
	p.errorf(n, field, "unsupported YAML value")
	return nil, false
}
