package retire_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/retire"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
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

// Retiring a rule on real NATS: every queued message (many keys, several each) and every
// parked and scheduled one becomes a dead letter with reason "rule removed", its stream and
// override are deleted, and a second run (another ingress, or a retry) finds nothing to do.
// The log line says how fast it went.
func TestRetireRule(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	ctx := context.Background()
	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	park, err := retry.NewStore(js, retry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ensure := range []func(context.Context) error{park.Ensure, dead.Ensure} {
		if err := ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ov, err := overrides.Open(ctx, js, overrides.Config{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse("r.yaml", []byte(`
domain: d
descriptors:
  - {key: a, name: gone, queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: "http://127.0.0.1:1/"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx, "gone", 100); err != nil {
		t.Fatal(err)
	}
	paused := true
	if _, err := ov.Apply(ctx, set.Rule("gone"), overrides.Patch{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 50, 20
	for k := range keys {
		for i := range perKey {
			key := "k-" + strconv.Itoa(k)
			id, _ := queue.NewID("gone", key)
			if _, err := q.Enqueue(ctx, "gone", queue.Message{ID: id, Key: key, Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		id, _ := queue.NewID("gone", "p")
		if _, err := park.Park(ctx, "gone", queue.Message{ID: id, Key: "p", Payload: []byte(`{}`)}, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		id, _ = queue.NewID("gone", "s")
		if _, err := park.Schedule(ctx, "gone", queue.Message{ID: id, Key: "s", Payload: []byte(strconv.Itoa(i))}, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}

	r := &retire.Retirer{Queues: q, Parking: park, Dead: dead, Overrides: ov, Logger: slog.New(slog.DiscardHandler)}
	r.Register(nil)
	start := time.Now()
	res, err := r.Rule(ctx, "gone")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retired %d queued and %d parked messages in %v (%.0f messages/s)", res.Queued, res.Parked, took, float64(res.Queued+res.Parked)/took.Seconds())
	if res.Queued != keys*perKey || res.Parked != 6 {
		t.Fatalf("retired %+v, want %d queued and 6 parked", res, keys*perKey)
	}
	if n, err := dead.Count(ctx, "gone"); err != nil || n != keys*perKey+6 {
		t.Fatalf("dead letters of gone: %d %v, want %d", n, err, keys*perKey+6)
	}
	if _, err := js.Stream(ctx, q.StreamName("gone")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the stream after retiring: %v, want deleted", err)
	}
	if _, ok, err := ov.Get(ctx, "gone"); ok || err != nil {
		t.Fatalf("the override after retiring: present %v, %v", ok, err)
	}
	if n, err := park.Parked(ctx, "gone"); err != nil || n != 0 {
		t.Fatalf("parked after retiring: %d %v", n, err)
	}
	if res, err := r.Rule(ctx, "gone"); err != nil || res.Queued != 0 || res.Parked != 0 {
		t.Fatalf("retiring again: %+v %v, want nothing to do", res, err)
	}
}
