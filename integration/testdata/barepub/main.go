// Command barepub is the end-to-end report's bare ceiling behind HTTP: it answers each POST
// by publishing the request body to a JetStream stream and answering 202 once the PubAck is
// in — the least any service that queues a request durably must do, with nothing of
// sluice's (no rules, no per-key capacity or Redis state, no idempotency). The report runs
// it as separate processes, as it runs the ingress, so both pay the same HTTP and NATS
// client costs. It logs one JSON line with its address when it listens.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	natsURL := flag.String("nats", nats.DefaultURL, "NATS URLs")
	prefix := flag.String("subject", "barehttp", "subject prefix: each message goes to <prefix>.k<n>")
	keys := flag.Int("keys", 1000, "distinct subjects the messages are spread over")
	flag.Parse()
	if err := run(*addr, *natsURL, *prefix, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "barepub:", err)
		os.Exit(1)
	}
}

func run(addr, natsURL, prefix string, keys int) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var seq atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		subject := prefix + ".k" + strconv.FormatInt(seq.Add(1)%int64(keys), 10)
		if _, err := js.Publish(r.Context(), subject, b); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	line, _ := json.Marshal(map[string]string{"msg": "barepub: listening", "addr": ln.Addr().String()})
	fmt.Println(string(line))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
