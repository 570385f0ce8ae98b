// Package natstest starts embedded NATS servers with JetStream for tests.
//
// The embedded server is the real nats-server (github.com/nats-io/nats-server/v2), run
// in-process on a random loopback port with its store in a test temp dir. Start gives
// one server per test; StartCluster gives an n-node JetStream cluster on loopback ports
// whose nodes can be shut down and restarted to test failover.
//
// This package is for tests only; production code never imports it.
package natstest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/freeport"
)

// Node is one embedded server. Its options are kept so it can be restarted with the same
// name, ports and store directory.
type Node struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
}

// Server returns the running server (nil while shut down).
func (n *Node) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// URL is the client URL of this node (stable across restarts).
func (n *Node) URL() string {
	if n.opts.TLSConfig != nil {
		return fmt.Sprintf("tls://%s:%d", n.opts.Host, n.opts.Port)
	}
	return fmt.Sprintf("nats://%s:%d", n.opts.Host, n.opts.Port)
}

// Name is the node's server name.
func (n *Node) Name() string { return n.opts.ServerName }

// Shutdown stops the node, like a crash of the process (the store stays). Safe to call twice.
func (n *Node) Shutdown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// Restart starts a shut-down node again with the same options.
func (n *Node) Restart() error {
	n.Shutdown()
	n.mu.Lock()
	defer n.mu.Unlock()
	opts := n.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("natstest: restart %s: %w", n.opts.ServerName, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		ports := fmt.Sprint(n.opts.Port)
		if n.opts.Cluster.Port != 0 {
			ports += fmt.Sprintf(" or %d", n.opts.Cluster.Port)
		}
		return fmt.Errorf("natstest: %s not ready %v after its start (port %s taken?)", n.opts.ServerName, readyTimeout, ports)
	}
	n.srv = srv
	return nil
}

// readyTimeout bounds the wait for a started node to accept connections. 30 s: under make
// test a dozen clusters start side by side on 2 cores, and a node missed 10 s once. A node
// whose port was taken before it bound it never becomes ready (it says nothing: NoLog).
var readyTimeout = 30 * time.Second

var nameSeq atomic.Int64

// Start starts a single JetStream server for one test; it is shut down when the test ends.
func Start(tb testing.TB) *Node { return StartTLS(tb, nil) }

// StartWith is Start with the server's options changed by opt first (e.g. a small
// JetStreamMaxStore, to fill the store).
func StartWith(tb testing.TB, opt func(*server.Options)) *Node { return start(tb, nil, opt) }

// StartTLS starts a single JetStream server that requires TLS with tc (its Certificates;
// with ClientCAs and ClientAuth set, client certificates too); URL is then tls://. A nil
// tc is Start.
func StartTLS(tb testing.TB, tc *tls.Config) *Node { return start(tb, tc, nil) }

func start(tb testing.TB, tc *tls.Config, opt func(*server.Options)) *Node {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	n := &Node{opts: server.Options{
		ServerName: fmt.Sprintf("sluice-test-%d", nameSeq.Add(1)),
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(tb.TempDir(), "js"),
		NoLog:      true,
		NoSigs:     true,
	}}
	if tc != nil {
		n.opts.TLS, n.opts.TLSConfig = true, tc
		n.opts.TLSVerify = tc.ClientAuth == tls.RequireAndVerifyClientCert
		n.opts.TLSTimeout = 5
	}
	if opt != nil {
		opt(&n.opts)
	}
	for attempt := 1; ; attempt++ {
		err := n.Restart()
		if err == nil {
			break
		} else if attempt == 3 {
			tb.Fatal(err)
		}
		tb.Logf("%v; starting it again on another port", err)
		if n.opts.Port, err = freePort(); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(n.Shutdown)
	return n
}

// StartLimited starts a single JetStream server whose file store holds at most
// maxFileStore bytes (a NATS volume smaller than the streams want).
func StartLimited(tb testing.TB, maxFileStore int64) *Node {
	return StartWith(tb, func(o *server.Options) { o.JetStreamMaxStore = maxFileStore })
}

// StartCluster starts an n-node JetStream cluster on loopback ports and waits until it
// has a meta leader, so R3 streams can be created at once. All nodes are shut down when
// the test ends.
func StartCluster(tb testing.TB, size int) []*Node { return StartClusterWith(tb, size, nil) }

// StartClusterWith is StartCluster with every node's options changed by opt first (e.g. a
// small JetStreamMaxStore, to fill the store).
func StartClusterWith(tb testing.TB, size int, opt func(*server.Options)) []*Node {
	tb.Helper()
	// A port picked free can still be taken before the node binds it (another test
	// process); the node then never becomes ready. Start again on other ports.
	var nodes []*Node
	for attempt := 1; ; attempt++ {
		var err error
		if nodes, err = startCluster(tb, size, opt); err == nil {
			break
		} else if attempt == 3 {
			tb.Fatal(err)
		}
		tb.Logf("%v; starting the cluster again on other ports", err)
	}
	for _, n := range nodes {
		tb.Cleanup(n.Shutdown)
	}
	if err := WaitJetStream(nodes[0].URL(), 30*time.Second); err != nil {
		tb.Fatal(err)
	}
	if err := waitReplicated(ClusterURL(nodes), size, 30*time.Second); err != nil {
		tb.Fatal(err)
	}
	return nodes
}

// startCluster starts the nodes of one cluster on free ports; when one does not start,
// it shuts the others down and says why.
func startCluster(tb testing.TB, size int, opt func(*server.Options)) ([]*Node, error) {
	clusterPorts := make([]int, size)
	routes := make([]*url.URL, size)
	for i := range clusterPorts {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		clusterPorts[i] = p
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	clusterName := fmt.Sprintf("sluice-c%d", nameSeq.Add(1))
	nodes := make([]*Node, size)
	for i := range nodes {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		nodes[i] = &Node{opts: server.Options{
			ServerName: fmt.Sprintf("%s-n%d", clusterName, i+1),
			Host:       "127.0.0.1",
			Port:       port,
			JetStream:  true,
			StoreDir:   filepath.Join(tb.TempDir(), fmt.Sprintf("n%d", i+1)),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name: clusterName,
				Host: "127.0.0.1",
				Port: clusterPorts[i],
			},
			Routes: routes,
		}}
		if opt != nil {
			opt(&nodes[i].opts)
		}
	}
	// Start all nodes before waiting for any: a node only becomes ready once it sees its routes.
	var wg sync.WaitGroup
	errs := make([]error, size)
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Restart()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			n.Shutdown()
		}
		return nil, err
	}
	return nodes, nil
}

// waitReplicated waits until a stream with one replica per node can be placed: the meta
// leader answers before it has seen every peer online, and an R3 stream created in that
// moment fails with "no suitable peers for placement".
func waitReplicated(url string, replicas int, timeout time.Duration) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"},
			Replicas: replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "NATSTEST_PROBE")
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: R%d placement not possible after %s: %w", replicas, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ClusterURL joins the nodes' URLs for a client that should fail over between them.
func ClusterURL(nodes []*Node) string {
	u := ""
	for i, n := range nodes {
		if i > 0 {
			u += ","
		}
		u += n.URL()
	}
	return u
}

// WaitJetStream waits until JetStream answers account info at url (cluster meta leader elected).
func WaitJetStream(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(url)
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("natstest: JetStream at %s not ready after %s: %w", url, timeout, lastErr)
}

// Connect opens a client connection to url and a JetStream context; both close when the test ends.
func Connect(tb testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatalf("natstest: connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

func freePort() (int, error) { return freeport.Loopback() }
