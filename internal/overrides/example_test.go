package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
)

func ExampleParsePatch() {
	p, err := overrides.ParsePatch([]byte(`{"outflow":{"unit":"second","requests_per_unit":5},"paused":true}`))
	fmt.Println(overrides.Override{}.Merge(p), err)

	_, err = overrides.ParsePatch([]byte(`{"outflow":{"unit":"second","requests_per_unit":0},"capacity":-1}`))
	var pe *overrides.PatchError
	fmt.Println(errors.Is(err, overrides.ErrInvalidPatch), errors.As(err, &pe), pe.Field)
	fmt.Println(err)
	// Output:
	// outflow=5/1s paused <nil>
	// true true capacity
	// overrides: capacity: must be ≥ 1 (got -1); outflow.requests_per_unit: must be ≥ 1 (got 0)
}

func ExampleEffective() {
	set, _ := rules.Parse("orders.yaml", []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders-per-merchant
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	r := set.Rule("orders-per-merchant")
	p, _ := overrides.ParsePatch([]byte(`{"outflow":{"interval":"1s","requests_per_unit":2}}`))
	eff, err := overrides.Effective(r, overrides.Override{}.Merge(p))
	fmt.Println(eff.Queue.Capacity, eff.Queue.Outflow.Every(), r.Queue.Outflow.Every(), err)
	// Output: 100 500ms 100ms <nil>
}

// How a drainer uses the overrides: one Store and one Watcher per process, then the
// watcher's view before every claim, and its Changed channel to wake up at once.
func Example_drainer() {
	ctx := context.Background()
	nc, _ := nats.Connect("nats://127.0.0.1:4222")
	js, _ := jetstream.New(nc)
	store, err := overrides.Open(ctx, js, overrides.Config{Replicas: 3})
	if err != nil {
		return
	}
	w := overrides.NewWatcher(store, overrides.WatcherConfig{Logger: slog.Default()})
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Start(startCtx); err != nil {
		slog.Warn("overrides not loaded yet; using the rules file until they are", "err", err)
	}
	defer w.Stop()

	var rule *rules.Rule // from the rules watcher
	for {
		changed := w.Changed() // take it before reading
		eff, o, err := w.Effective(rule)
		if err != nil {
			slog.Error("override ignored", "rule", rule.Name, "err", err)
		}
		if !o.IsPaused() {
			_ = eff.Queue.Outflow.Every() // claim and deliver at the effective outflow
		}
		select {
		case <-changed: // an operator changed something: re-read at once
		case <-time.After(eff.Queue.Outflow.Every()):
		}
	}
}
