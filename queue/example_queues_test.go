package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/queue"
)

// startNATS runs an embedded NATS server with JetStream (the real server, in process) and
// returns a JetStream client on it and a function that stops both.
func startNATS() (jetstream.JetStream, func()) {
	dir, err := os.MkdirTemp("", "queue-example-")
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

// One queue per key, bounded by the server itself: the (capacity+1)-th message of a key
// is refused with ErrFull, atomically for any number of publishers, while other keys of
// the rule have their own room. A consumer reads a key's head with Pop and deletes it
// once it is handled (at least once: a head that is not deleted is read again).
func ExampleQueues() {
	js, stop := startNATS()
	defer stop()
	ctx := context.Background()

	q, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Ensure(ctx, "orders", 2); err != nil { // 2 messages per key
		log.Fatal(err)
	}
	enqueue := func(key, payload string) error {
		id, err := queue.NewID("orders", key)
		if err != nil {
			return err
		}
		_, err = q.Enqueue(ctx, "orders", queue.Message{ID: id, Key: key, Payload: []byte(payload), CreatedAt: time.Now()})
		return err
	}
	for i, key := range []string{"m-42", "m-42", "m-42", "shop/🙂 7"} {
		err := enqueue(key, fmt.Sprintf(`{"order":%d}`, i+1))
		fmt.Printf("%s order %d: full=%v\n", key, i+1, errors.Is(err, queue.ErrFull))
	}

	head, err := q.Pop(ctx, "orders", "m-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("head of m-42: %s\n", head.Payload)
	if err := q.Delete(ctx, "orders", head.Seq); err != nil { // after the sink accepted it
		log.Fatal(err)
	}
	depth, err := q.Depth(ctx, "orders", "m-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("m-42 now holds %d; deleting it again: gone=%v\n", depth, errors.Is(q.Delete(ctx, "orders", head.Seq), queue.ErrGone))
	// Output:
	// m-42 order 1: full=false
	// m-42 order 2: full=false
	// m-42 order 3: full=true
	// shop/🙂 7 order 4: full=false
	// head of m-42: {"order":1}
	// m-42 now holds 1; deleting it again: gone=true
}
