package rules

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// byteUnits are the suffixes ParseByteSize accepts, longest first so "MiB" is not read as
// "B" after "Mi". Powers of 1024 (KiB, MiB, GiB, TiB) and of 1000 (KB, MB, GB, TB).
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseByteSize reads a size in bytes: a whole number, optionally followed by a unit
// (B, KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024), e.g.
// "1048576", "512MiB", "1GB". Spaces between number and unit are allowed.
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	factor := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("must be a size like 1048576, 512MiB or 1GB (got %q)", s)
	}
	if n > 0 && factor > 1 && n > (1<<62)/factor {
		return 0, fmt.Errorf("is too large (got %q)", s)
	}
	return n * factor, nil
}

// byteSize parses a size field: an integer of bytes, or a string ParseByteSize reads.
func (p *fileParser) byteSize(n *yaml.Node, field string) (int64, bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		p.errorf(n, field, "must be a size like 1048576, 512MiB or 1GB (got %s)", describe(n))
		return 0, false
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		p.errorf(n, field, "%s", err.Error())
		return 0, false
	}
	return v, true
}
