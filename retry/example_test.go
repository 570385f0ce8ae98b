package retry_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// Wiring the retry stream, the dead letters and a re-admitter inside a drainer process.
// (Compiled, not run: it needs a NATS server, Redis and a rules watcher.)
func Example_wiring() {
	var (
		js      jetstream.JetStream // connected to NATS
		queues  *queue.Queues       // the per-key queues
		sched   *queue.Scheduler    // the Redis outflow scheduler
		watcher *rules.Watcher      // the current rules
	)
	ctx := context.Background()
	lookup := func(name string) *rules.Rule { return watcher.Current().Rule(name) }

	store, err := retry.NewStore(js, retry.Config{})
	if err != nil {
		log.Fatal(err)
	}
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{Rules: lookup})
	if err != nil {
		log.Fatal(err)
	}
	if err := errors.Join(store.Ensure(ctx), dead.Ensure(ctx)); err != nil {
		log.Fatal(err)
	}

	// Admit: the ingress's admission without the parking. Admission limits (bucket/) come
	// first in the real wiring and answer WindowClosed with the window's reset.
	admit := func(ctx context.Context, rule *rules.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		_, err := queues.EnqueueAs(ctx, rule.Name, m, msgID) // a Duplicate is admitted too
		if errors.Is(err, queue.ErrFull) {
			depth, derr := queues.Depth(ctx, rule.Name, m.Key)
			if derr != nil {
				depth = 1
			}
			return retry.AdmitResult{
				Outcome: retry.Full,
				RetryAt: time.Now().Add(time.Duration(depth) * rule.Queue.Outflow.Every()),
			}, nil
		}
		if err != nil {
			return retry.AdmitResult{}, err
		}
		return retry.AdmitResult{Outcome: retry.Admitted}, sched.MarkDue(ctx, rule.Name, m.Key)
	}

	r, err := retry.NewReadmitter(retry.ReadmitterConfig{Store: store, Dead: dead, Admit: admit, Rules: lookup})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer r.Stop()

	// The drainer takes store as its drain.Retrier and dead as its drain.DeadLetters; the
	// ingress parks with store.Park and reports the returned time as retry_at.
}
