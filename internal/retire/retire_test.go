package retire_test

import (
	"slices"
	"testing"

	"github.com/sluice-io/sluice/internal/retire"
	"github.com/sluice-io/sluice/internal/rules"
)

// A queue rule gone from the rules, or become check-only, is removed; a check rule gone,
// or a queue rule kept, is not.
func TestRemoved(t *testing.T) {
	t.Parallel()
	parse := func(doc string) *rules.Set {
		s, err := rules.Parse("r.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := parse(`
domain: d
descriptors:
  - {key: a, name: kept, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
  - {key: b, name: gone, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
  - {key: c, name: checked, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
  - {key: e, name: check, rate_limit: {unit: second, requests_per_unit: 1}}
`)
	after := parse(`
domain: d
descriptors:
  - {key: a, name: kept, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
  - {key: c, name: checked, rate_limit: {unit: second, requests_per_unit: 1}}
`)
	got := retire.Removed(before, after)
	slices.Sort(got)
	if !slices.Equal(got, []string{"checked", "gone"}) {
		t.Fatalf("Removed = %v, want [checked gone]", got)
	}
	if got := retire.Removed(nil, after); got != nil {
		t.Fatalf("Removed(nil, …) = %v", got)
	}
}
