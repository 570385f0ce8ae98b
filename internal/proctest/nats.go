package proctest

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/internal/freeport"
)

// NATSCluster is a JetStream cluster of nats-server processes (built from the module's
// github.com/nats-io/nats-server/v2 dependency), so a node can be SIGKILLed like a crash,
// which an embedded server cannot.
type NATSCluster struct {
	Nodes    []*Proc
	names    []string
	urls     []string
	stores   []string // each node's -sd
	monitors []string // each node's monitoring base URL
}

// BuildNATSServer builds nats-server from the module's dependency into dir.
func BuildNATSServer(dir string) error {
	return Build(dir, "github.com/nats-io/nats-server/v2")
}

// StartNATSCluster starts size nodes of one cluster, each with JetStream and its own
// store under a test temp dir, on free loopback ports, and waits until every node answers
// /healthz. A node keeps its ports and store across Restart.
func StartNATSCluster(tb testing.TB, bin string, size int) *NATSCluster {
	tb.Helper()
	type ports struct{ client, cluster, monitor int }
	ps := make([]ports, size)
	var routes []string
	for i := range ps {
		ps[i] = ports{freePort(tb), freePort(tb), freePort(tb)}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ps[i].cluster))
	}
	name := fmt.Sprintf("proc-c%d", clusterSeq.next())
	c := &NATSCluster{}
	specs := make([]Spec, size)
	for i, p := range ps {
		node := fmt.Sprintf("%s-n%d", name, i+1)
		c.names = append(c.names, node)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", p.client))
		c.stores = append(c.stores, filepath.Join(tb.TempDir(), node))
		c.monitors = append(c.monitors, fmt.Sprintf("http://127.0.0.1:%d", p.monitor))
		specs[i] = Spec{Name: node, Bin: bin,
			Addr:     fmt.Sprintf("127.0.0.1:%d", p.client),
			ReadyURL: fmt.Sprintf("http://127.0.0.1:%d/healthz", p.monitor),
			Args: []string{"-n", node, "-a", "127.0.0.1", "-p", fmt.Sprint(p.client), "-m", fmt.Sprint(p.monitor),
				"-js", "-sd", c.stores[i],
				"--cluster_name", name, "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", p.cluster),
				"--routes", strings.Join(routes, ",")}}
	}
	// All at once: a node is only healthy once it sees the others.
	c.Nodes = make([]*Proc, size)
	var wg sync.WaitGroup
	errs := make([]any, size)
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { errs[i] = recover() }()
			c.Nodes[i] = Start(panicTB{tb}, specs[i])
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			tb.Fatal(e)
		}
	}
	return c
}

// URL is the comma-separated client URLs of every node.
func (c *NATSCluster) URL() string { return strings.Join(c.urls, ",") }

// Node returns the node with the given server name, or nil.
func (c *NATSCluster) Node(name string) *Proc {
	for i, n := range c.names {
		if n == name {
			return c.Nodes[i]
		}
	}
	return nil
}

// Name is the server name of node i.
func (c *NATSCluster) Name(i int) string { return c.names[i] }

// Index is the index in Nodes of the node with the given server name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

// StoreDir is node i's store directory (its -sd; JetStream keeps its data in
// StoreDir/jetstream). Deleting it while the node is down simulates a lost disk: the node
// restarts with the same server name, ports and an empty store.
func (c *NATSCluster) StoreDir(i int) string { return c.stores[i] }

// MonitorURL is node i's monitoring base URL (e.g. MonitorURL(i)+"/jsz"), which answers
// from that node's own state rather than from a stream leader's.
func (c *NATSCluster) MonitorURL(i int) string { return c.monitors[i] }

// panicTB turns Fatal into a panic, for Start off the test goroutine.
type panicTB struct{ testing.TB }

func (p panicTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (p panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

type seq struct {
	mu sync.Mutex
	n  int
}

func (s *seq) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.n
}

var clusterSeq seq

func freePort(tb testing.TB) int {
	port, err := freeport.Loopback()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}
