package natstest

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A node whose port is taken before it binds it is started again on another port.
func TestStartAgainWhenThePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	readyTimeout = time.Second
	t.Cleanup(func() { readyTimeout = 30 * time.Second })

	n := StartWith(t, func(o *server.Options) { o.Port = port })
	if n.opts.Port == port {
		t.Fatalf("the node kept the taken port %d", port)
	}
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
