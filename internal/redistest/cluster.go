package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions configure a private Redis Cluster.
type ClusterOptions struct {
	// Masters is the number of masters; the 16384 slots are split evenly among them.
	// Default 3 (the least redis-cli accepts for a cluster).
	Masters int
	// Replicas is the number of replicas per master. Default 0; SharedCluster uses 1.
	Replicas int
}

// Cluster is a Redis Cluster of private redis-server processes on free 127.0.0.1 ports,
// formed by the harness itself (CLUSTER ADDSLOTSRANGE, MEET, REPLICATE), so it needs
// nothing but redis-server.
type Cluster struct {
	dir      string
	Masters  []*Server
	Replicas []*Server // Replicas[i] follows Masters[i % len(Masters)]
}

var (
	clusterOnce sync.Once
	cluster     *Cluster
	clusterErr  error
)

// SharedCluster returns the test binary's shared cluster (3 masters, 1 replica each),
// started on first use and stopped by Main. Tests share it the way they share Shared: each
// with its own key prefix.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	clusterOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-redis-cluster-")
		if err != nil {
			clusterErr = err
			return
		}
		cluster, clusterErr = startCluster(dir, ClusterOptions{Masters: 3, Replicas: 1})
	})
	if clusterErr != nil {
		tb.Fatalf("redistest: cluster: %v", clusterErr)
	}
	return cluster
}

// StartCluster starts a cluster owned by one test; it is stopped when the test ends.
func StartCluster(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	c, err := startCluster(tb.TempDir(), opts)
	if err != nil {
		tb.Fatalf("redistest: cluster: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

func startCluster(dir string, opts ClusterOptions) (c *Cluster, err error) {
	if opts.Masters <= 0 {
		opts.Masters = 3
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "yes",
		// A replica's first sync starts at once instead of after the default 5 s wait for more replicas.
		"--repl-diskless-sync-delay", "0"}
	for i := 0; i < opts.Masters*(1+opts.Replicas); i++ {
		d := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		s, err := start(d, Options{TCP: true, args: args})
		if err != nil {
			return nil, err
		}
		if i < opts.Masters {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if err := c.form(opts); err != nil {
		return nil, err
	}
	return c, nil
}

// form joins the nodes into one cluster: slots to the masters, every node meets the
// first, replicas follow their masters, and it waits until every node says the cluster is
// ok and every replica is in sync.
func (c *Cluster) form(opts ClusterOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := c.Nodes()
	clients := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = redis.NewClient(n.Options())
		defer clients[i].Close()
	}
	ids := make([]string, len(nodes))
	for i, cl := range clients {
		id, err := cl.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", nodes[i].Addr(), err)
		}
		ids[i] = id
		// Distinct epochs, so the nodes need not resolve collisions before agreeing.
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", nodes[i].Addr(), err)
		}
	}
	per := 16384 / opts.Masters
	for i := range c.Masters {
		from, to := i*per, (i+1)*per-1
		if i == opts.Masters-1 {
			to = 16383
		}
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", nodes[i].Addr(), err)
		}
	}
	host, port := splitAddr(nodes[0].Addr())
	for i := 1; i < len(nodes); i++ {
		if err := clients[i].Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET from %s: %w", nodes[i].Addr(), err)
		}
	}
	// A replica can follow a master only once it knows that node.
	for i := range c.Replicas {
		r := clients[len(c.Masters)+i]
		master := ids[i%len(c.Masters)]
		if err := waitFor(ctx, func() bool {
			out, err := r.Do(ctx, "CLUSTER", "NODES").Text()
			return err == nil && strings.Contains(out, master)
		}); err != nil {
			return fmt.Errorf("replica %s never learnt of its master: %w", c.Replicas[i].Addr(), err)
		}
		if err := r.Do(ctx, "CLUSTER", "REPLICATE", master).Err(); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", c.Replicas[i].Addr(), err)
		}
	}
	for i, cl := range clients {
		if err := waitFor(ctx, func() bool {
			info, err := cl.Do(ctx, "CLUSTER", "INFO").Text()
			return err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))+"\r")
		}); err != nil {
			info, _ := cl.Do(context.Background(), "CLUSTER", "INFO").Text()
			return fmt.Errorf("node %s: cluster not ok: %w: %s", nodes[i].Addr(), err, info)
		}
	}
	for i := range c.Replicas {
		r := clients[len(c.Masters)+i]
		if err := waitFor(ctx, func() bool {
			info, err := r.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up")
		}); err != nil {
			return fmt.Errorf("replica %s never synced: %w", c.Replicas[i].Addr(), err)
		}
	}
	return nil
}

// Nodes lists masters, then replicas.
func (c *Cluster) Nodes() []*Server {
	return append(append([]*Server(nil), c.Masters...), c.Replicas...)
}

// Addrs are the host:port addresses of the masters (seed nodes).
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Masters {
		a = append(a, s.Addr())
	}
	return a
}

// URL is a -redis URL of the cluster: redis://first?addr=second&addr=third.
func (c *Cluster) URL() string {
	a := c.Addrs()
	u := "redis://" + a[0]
	for i, x := range a[1:] {
		if i == 0 {
			u += "?"
		} else {
			u += "&"
		}
		u += "addr=" + x
	}
	return u
}

// Options returns go-redis cluster options for this cluster.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new cluster client, closed when the test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(c.Options())
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Stop kills every node. Safe to call twice.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes() {
		s.Stop()
	}
}

func splitAddr(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// waitFor polls cond every 20 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
