package rules

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

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

// intIn reads an integer that must lie in [lo, hi]; ok is false (and the error recorded)
// otherwise.
func (p *fileParser) intIn(n *yaml.Node, field string, lo, hi int64) (int, bool) {
	v, ok := p.int64(n, field)
	if !ok {
		return 0, false
	}
	if v < lo || v > hi {
		p.errorf(n, field, "must be between %d and %d (got %d)", lo, hi, v)
		return 0, false
	}
	return int(v), true
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
