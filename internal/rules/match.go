package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Set is a loaded, validated rules set. It is immutable once returned by Load or Parse
// and safe for concurrent use; a reload builds a new Set (see Watcher).
// The zero value and nil are empty sets that match nothing.
type Set struct {
	domains     map[string]*node
	domainOrder []string
	rules       []*Rule // definition order: files in order, documents in order, depth first
	byName      map[string]*Rule
	files       []string
}

// Entry is one key/value pair of a request's descriptor, e.g. {merchant_id m-42}.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Match is the outcome of matching one descriptor: the rule and the bucket key.
type Match struct {
	Rule *Rule
	// Key selects the bucket (queue, counter) under Rule; see Match for how it is built.
	Key string
}

// node is one level of a domain's descriptor tree. Children are found by exact
// key+value first, then by wildcard value (in file order), then by key alone.
type node struct {
	rule    *Rule
	varying bool // this level's request value is part of the Key
	exact   map[PathEntry]*node
	wild    []wildChild
	keyOnly map[string]*node
}

type wildChild struct {
	key     string
	pattern string
	glob    glob
	node    *node
}

// addChild links child under n; false when an equal sibling already exists.
func (n *node) addChild(e PathEntry, child *node) bool {
	switch {
	case e.Value == "":
		if _, dup := n.keyOnly[e.Key]; dup {
			return false
		}
		if n.keyOnly == nil {
			n.keyOnly = map[string]*node{}
		}
		n.keyOnly[e.Key] = child
	case strings.Contains(e.Value, wildcard):
		for _, w := range n.wild {
			if w.key == e.Key && w.pattern == e.Value {
				return false
			}
		}
		n.wild = append(n.wild, wildChild{key: e.Key, pattern: e.Value, glob: newGlob(e.Value), node: child})
	default:
		if _, dup := n.exact[e]; dup {
			return false
		}
		if n.exact == nil {
			n.exact = map[PathEntry]*node{}
		}
		n.exact[e] = child
	}
	return true
}

// glob matches '*' (any run of bytes, including none); every other byte is literal.
// envoy only supports a trailing '*' (prefix match); that is the special case
// parts = [prefix, ""].
type glob struct{ parts []string }

func newGlob(pattern string) glob { return glob{parts: strings.Split(pattern, wildcard)} }

func (g glob) match(s string) bool {
	p := g.parts
	if !strings.HasPrefix(s, p[0]) {
		return false
	}
	s = s[len(p[0]):]
	last := p[len(p)-1]
	// Leftmost matching of each middle part is optimal when '*' is the only
	// metacharacter: it leaves the longest possible tail for the rest.
	for _, mid := range p[1 : len(p)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}

// Match finds the rule for one descriptor of domain, with envoyproxy/ratelimit's
// semantics (config_impl.go GetLimit): the entries are walked level by level from the
// domain root; at each level the child is the one configured with the same key and
// value, else the first (in file order) whose wildcard value matches, else the one
// configured with the key and no value. The result is the rule at the node reached by
// the whole descriptor — a descriptor that is longer or shorter than any configured
// path, or that ends on a node without rate_limit/queue, matches nothing. There is no
// backtracking: an exact match that leads nowhere is not retried as a wildcard.
//
// Key is built from the request's values at the levels whose configured value is
// empty or a wildcard (for a wildcard with share_threshold, envoy shares one counter
// among all matching values, so that level is not part of the Key):
//
//   - no such level: Key is "" — one bucket for the whole rule;
//   - exactly one: Key is that value verbatim (merchant "m-42" → Key "m-42"), so the
//     admin API can address it directly;
//   - several: EncodeKey of the values, an unambiguous length-prefixed encoding.
//
// Keys are data: any bytes, never interpreted. The number of varying levels is fixed
// per rule, so within one rule distinct value tuples always give distinct Keys.
//
// Match does not allocate unless several levels vary (then once, for the Key).
func (s *Set) Match(domain string, entries []Entry) (Match, bool) {
	if s == nil || len(entries) == 0 {
		return Match{}, false
	}
	n := s.domains[domain]
	if n == nil {
		return Match{}, false
	}
	for i := range entries {
		e := &entries[i]
		next := n.exact[PathEntry{Key: e.Key, Value: e.Value}]
		if next == nil {
			for j := range n.wild {
				if w := &n.wild[j]; w.key == e.Key && w.glob.match(e.Value) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = n.keyOnly[e.Key]
		}
		if next == nil {
			return Match{}, false
		}
		n = next
	}
	if n.rule == nil {
		return Match{}, false
	}
	return Match{Rule: n.rule, Key: n.rule.keyOf(entries)}, true
}

// keyOf builds the Key from a descriptor that matched r (len(entries) == len(r.Path)).
func (r *Rule) keyOf(entries []Entry) string {
	switch len(r.varying) {
	case 0:
		return ""
	case 1:
		return entries[r.varying[0]].Value
	}
	size := 0
	for _, i := range r.varying {
		size += len(entries[i].Value) + 4
	}
	var b strings.Builder
	b.Grow(size)
	for _, i := range r.varying {
		appendKeyPart(&b, entries[i].Value)
	}
	return b.String()
}

// KeyLevels is the number of descriptor levels whose values make up the rule's Key
// (0: one bucket for the rule; 1: the Key is the value itself; more: EncodeKey).
func (r *Rule) KeyLevels() int { return len(r.varying) }

// EncodeKey builds a Key from the values of the varying levels, as Match does:
// "" for none, the value itself for one, and for several the concatenation of
// "<decimal byte length>:<value>" for each value — e.g. ("a", "b:c") → "1:a3:b:c".
// A length prefix needs no escaping and is unambiguous, so distinct tuples of the
// same arity never share a Key.
func EncodeKey(values ...string) string {
	switch len(values) {
	case 0:
		return ""
	case 1:
		return values[0]
	}
	var b strings.Builder
	for _, v := range values {
		appendKeyPart(&b, v)
	}
	return b.String()
}

func appendKeyPart(b *strings.Builder, v string) {
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(len(v)), 10))
	b.WriteByte(':')
	b.WriteString(v)
}

// ErrBadKey is returned by DecodeKey for a Key that EncodeKey cannot have produced.
var ErrBadKey = errors.New("rules: malformed key")

// DecodeKey splits a Key of a rule with n varying levels back into its values
// (the inverse of EncodeKey).
func DecodeKey(key string, n int) ([]string, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("%w: negative level count", ErrBadKey)
	case n == 0:
		if key != "" {
			return nil, fmt.Errorf("%w: rule has no varying level but key is not empty", ErrBadKey)
		}
		return nil, nil
	case n == 1:
		return []string{key}, nil
	}
	out := make([]string, 0, n)
	for len(out) < n {
		colon := strings.IndexByte(key, ':')
		if colon <= 0 || colon > 19 {
			return nil, fmt.Errorf("%w: missing length prefix", ErrBadKey)
		}
		l, err := strconv.Atoi(key[:colon])
		if err != nil || l < 0 || l > len(key)-colon-1 || (colon > 1 && key[0] == '0') {
			return nil, fmt.Errorf("%w: bad length prefix %q", ErrBadKey, key[:colon])
		}
		out = append(out, key[colon+1:colon+1+l])
		key = key[colon+1+l:]
	}
	if key != "" {
		return nil, fmt.Errorf("%w: trailing bytes", ErrBadKey)
	}
	return out, nil
}

// CheckResult is the decision input for one descriptor of a check request.
type CheckResult struct {
	Match // Rule is nil when the descriptor matched no rule: envoy answers OK for it.
	// Replaced: another rule matched by the same request lists this rule in its
	// `replaces`, so this rule is not applied (envoy: the replacing limit wins).
	Replaced bool
}

// Applies reports whether the descriptor's limit must be counted and may deny: a rule
// matched, it is not unlimited and it was not replaced. A shadow-mode rule applies
// (it is counted and reported) but must never deny; see Rule.ShadowMode.
func (c CheckResult) Applies() bool {
	return c.Rule != nil && !c.Rule.Unlimited && !c.Replaced
}

// Check matches each descriptor of an envoy-style check request (POST /v1/check)
// independently and then applies envoy's `replaces`: the names listed in the replaces
// of every matched rule (unlimited ones included) are collected, and a matched rule
// answering to one of them — by its rule name or the name of one of its limits — is
// marked Replaced. Unlimited rules are never replaced (envoy sets them aside first).
// The result has one entry per descriptor, in order.
func (s *Set) Check(domain string, descriptors [][]Entry) []CheckResult {
	out := make([]CheckResult, len(descriptors))
	anyReplaces := false
	for i, d := range descriptors {
		if m, ok := s.Match(domain, d); ok {
			out[i].Match = m
			anyReplaces = anyReplaces || len(m.Rule.Replaces) > 0
		}
	}
	if !anyReplaces {
		return out
	}
	// Requests carry a handful of descriptors; a quadratic scan beats building a map.
	for i := range out {
		r := out[i].Rule
		if r == nil || r.Unlimited {
			continue
		}
		for j := range out {
			if o := out[j].Rule; o != nil && o.replaces(r) {
				out[i].Replaced = true
				break
			}
		}
	}
	return out
}

// replaces reports whether r's `replaces` names other.
func (r *Rule) replaces(other *Rule) bool {
	for _, name := range r.Replaces {
		if name == other.Name {
			return true
		}
		for _, l := range other.RateLimits {
			if l.Name != "" && l.Name == name {
				return true
			}
		}
	}
	return false
}

// Rule returns the rule with that name, or nil.
func (s *Set) Rule(name string) *Rule {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Rules returns every rule in definition order (files in the order loaded, documents
// in file order, descriptors depth first). The slice is a copy; the rules are shared
// and must not be modified.
func (s *Set) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return append([]*Rule(nil), s.rules...)
}

// QueueRules returns the rules that have a queue, in definition order.
func (s *Set) QueueRules() []*Rule {
	if s == nil {
		return nil
	}
	var out []*Rule
	for _, r := range s.rules {
		if r.HasQueue() {
			out = append(out, r)
		}
	}
	return out
}

// Domains returns the domains defined, in definition order.
func (s *Set) Domains() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.domainOrder...)
}

// Files returns the files the set was loaded from, in load order.
func (s *Set) Files() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.files...)
}
