package rules

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := CheckConfig(&out, "../../deploy/examples"); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.HasPrefix(out.String(), "rules: OK: 11 rules (2 queue rules, 9 check-only rules) in 4 domains from 4 files\n") ||
		!strings.Contains(out.String(), "orders-per-merchant") {
		t.Errorf("summary:\n%s", out.String())
	}

	path := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, path, "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n  - key: b\n    queue: {capacity: 0}\n")
	out.Reset()
	if err := CheckConfig(&out, path); err == nil {
		t.Fatal("no error")
	}
	want := "rules: 4 problem(s):\n" +
		path + `:4: descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year (got "sec"); or use interval: <duration>` + "\n" +
		path + ":5: descriptors[1].sink: required for a rule with a queue (where should the drainers deliver?)\n" +
		path + ":6: descriptors[1].queue.capacity: must be ≥ 1 (got 0)\n" +
		path + ":6: descriptors[1].queue.outflow: required\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := CheckConfig(&out, filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(out.String(), "no such file") {
		t.Errorf("missing file: %v %q", err, out.String())
	}
}
