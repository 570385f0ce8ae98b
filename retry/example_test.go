package retry_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// startNATS runs an embedded NATS server with JetStream (the real server, in process) and
// returns a JetStream client on it and a function that stops both.
func startNATS() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "retry-example-")
	if err != nil {
		log.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	return js, func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }
}

// A message that found no room is parked until a given time; when its schedule fires, the
// re-admitter offers it to the program's AdmitFunc, which here finds room the second time.
// A message still without room when its rule's ParkMaxAge passes becomes a dead letter.
func Example() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	store, err := retry.NewStore(js, retry.Config{})
	if err != nil {
		log.Fatal(err)
	}
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Ensure(ctx); err != nil {
		log.Fatal(err)
	}
	if err := dead.Ensure(ctx); err != nil {
		log.Fatal(err)
	}

	// The AdmitFunc puts a message back where it waits for delivery; it reports "no room"
	// as a value. This one has room from the second offer on.
	admitted := make(chan queue.Message)
	var offers atomic.Int32
	admit := func(ctx context.Context, rule retry.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		if offers.Add(1) == 1 {
			return retry.AdmitResult{Outcome: retry.Full, RetryAt: time.Now().Add(time.Second)}, nil
		}
		admitted <- m
		return retry.AdmitResult{Outcome: retry.Admitted}, nil
	}
	r, err := retry.NewReadmitter(retry.ReadmitterConfig{
		Store: store, Dead: dead, Admit: admit,
		Rules:      retry.Rules(retry.Rule{Name: "orders", ParkMaxAge: time.Hour}),
		MinBackoff: time.Second, MaxBackoff: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer r.Stop()

	id, err := queue.NewID("orders", "m-42")
	if err != nil {
		log.Fatal(err)
	}
	m := queue.Message{ID: id, Key: "m-42", Payload: []byte(`{"order_id":991}`), CreatedAt: time.Now()}
	if _, err := store.Park(ctx, "orders", m, time.Now()); err != nil {
		log.Fatal(err)
	}
	got := <-admitted
	fmt.Printf("re-admitted %s of rule %s after %d offers: %s\n", got.Key, got.Rule, offers.Load(), got.Payload)
	// Output: re-admitted m-42 of rule orders after 2 offers: {"order_id":991}
}
