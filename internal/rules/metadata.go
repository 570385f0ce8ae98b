package rules

import (
	"fmt"
	"math"

	"gopkg.in/yaml.v3"
)

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
