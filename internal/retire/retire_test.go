package retire_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/retire"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
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

// Orphans names the queue streams of rules not in the rules (removed while no ingress ran),
// with their messages, and nothing else: not the streams of rules in force, not the
// other streams sluice keeps.
func TestOrphans(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, rule := range []string{"kept", "gone"} {
		if err := q.Ensure(ctx, rule, 10); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		id, _ := queue.NewID("gone", "k")
		if _, err := q.Enqueue(ctx, "gone", queue.Message{ID: id, Key: "k", Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SLUICE_DEAD", Subjects: []string{"dead.>"}}); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse("r.yaml", []byte(`
domain: d
descriptors:
  - {key: a, name: kept, queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := retire.Orphans(ctx, js, q, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["SLUICE_Q_gone"] != 3 {
		t.Fatalf("Orphans = %v, want SLUICE_Q_gone with 3 messages", got)
	}
}
