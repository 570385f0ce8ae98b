package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-io/sluice/internal/waittest"
)

// faultNodeLostDisk is a lost disk on an R3 cluster: the node that leads the queue
// stream is SIGKILLed, its whole store directory is deleted, and it restarts empty under
// the same server name and ports. nats-server (v2.15) needs no peer removal or re-add
// for that: a server's raft peer id is derived from its server name, so the empty node
// rejoins the meta group as the same peer, is sent the meta snapshot, recreates the
// replicas assigned to it and catches each one up from its stream's (or consumer's)
// leader. The row measures restart → every stream and consumer of the account lists the
// node as a current replica with lag 0, then, once the load is verified, compares the
// node's own store (its /jsz, not a leader's answer) with each stream's leader.
func faultNodeLostDisk(t *testing.T, p faultParams) faultRow {
	c, l := faultSetupWith(t, p, clusterOptions{rules: faultRules, natsProcesses: true})
	stream := streamName("faults")
	leader := c.streamLeader(stream)
	i := c.natsProcs.Index(leader)
	if i < 0 {
		t.Fatalf("stream leader %q is not one of the cluster's nodes", leader)
	}
	node, store := c.natsProcs.Nodes[i], c.natsProcs.StoreDir(i)
	before := c.nodeStreams(i)
	if _, ok := before[stream]; !ok {
		t.Fatalf("%s holds no replica of %s before the fault: %v", leader, stream, before)
	}
	metaLeader := c.metaLeader(i)

	killed := time.Now()
	node.Kill()
	if _, err := os.Stat(filepath.Join(store, "jetstream")); err != nil {
		t.Fatalf("no JetStream store to lose: %v", err)
	}
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	time.Sleep(p.downtime) // the node stays down this long (the load keeps running)
	// Restart returns once the node's /healthz answers 200, which nats-server gives only
	// when its JetStream assets are current: the catch-up is mostly inside it, so the
	// recovery is timed from the start of the process.
	restarted := time.Now()
	if err := node.Restart(); err != nil {
		t.Fatal(err)
	}
	healthy := time.Since(restarted)
	var lagging []string
	if !waittest.Within(3*time.Minute, func() bool {
		lagging = c.replicaLagging(leader)
		return len(lagging) == 0
	}) {
		t.Fatalf("%s not caught up 3 min after it rejoined with an empty store: %v", leader, lagging)
	}
	recovery := time.Since(restarted)
	pause := l.longestAckGap(killed, time.Now())
	time.Sleep(p.after)
	v := faultFinish(t, p, c, l, "node lost its disk")

	// The node's own copy: every stream it held before is back, with the leader's state.
	var differ []string
	if !waittest.Within(30*time.Second, func() bool {
		differ = differ[:0]
		local := c.nodeStreams(i)
		for name := range before {
			want, err := c.streamState(name)
			if err != nil {
				differ = append(differ, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			got, ok := local[name]
			if !ok || got.FirstSeq != want.FirstSeq || got.LastSeq != want.LastSeq || got.Msgs != want.Msgs {
				differ = append(differ, fmt.Sprintf("%s: node %+v, leader %+v", name, got, want))
			}
		}
		return len(differ) == 0
	}) {
		t.Errorf("the node's store differs from the leaders' after the load: %v", differ)
	}
	q := c.nodeStreams(i)[stream]
	return faultRow{Fault: "NATS node lost its disk (SIGKILL, store deleted, rejoined empty)", V: v, Recovery: recovery,
		What: "restart → node a current replica (lag 0) of every stream and consumer",
		Note: fmt.Sprintf("the %s leader %s (meta leader: %s) killed, its store deleted, restarted empty after %v (healthz 200 after %.1f s); no peer removal needed (same server name); %d streams caught up, %s at last seq %d on the node; longest time without any 202: %.1f s; %d answers 503",
			stream, leader, metaLeader, p.downtime, healthy.Seconds(), len(before), stream, q.LastSeq, pause.Seconds(), l.unavailable.Load())}
}

// localStream is one stream as a node holds it (its /jsz stream detail).
type localStream struct {
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Msgs     uint64 `json:"messages"`
}

// nodeStreams reads node i's own streams from its monitoring endpoint.
func (c *cluster) nodeStreams(i int) map[string]localStream {
	c.t.Helper()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string      `json:"name"`
				State localStream `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	resp, err := c.http.Get(c.natsProcs.MonitorURL(i) + "/jsz?accounts=true&streams=true")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&jsz) != nil {
		return nil
	}
	out := map[string]localStream{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			out[s.Name] = s.State
		}
	}
	return out
}

// metaLeader is the meta group's leader as node i sees it.
func (c *cluster) metaLeader(i int) string {
	var jsz struct {
		Meta struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	resp, err := c.http.Get(c.natsProcs.MonitorURL(i) + "/jsz")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	if json.NewDecoder(resp.Body).Decode(&jsz) != nil || jsz.Meta.Leader == "" {
		return "?"
	}
	return jsz.Meta.Leader
}

func (c *cluster) streamState(name string) (localStream, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return localStream{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return localStream{}, err
	}
	return localStream{FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq, Msgs: info.State.Msgs}, nil
}

// replicaLagging lists every replicated stream and consumer in which the server named
// node is not yet a current, online replica with lag 0 (empty when it has caught up).
func (c *cluster) replicaLagging(node string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lagging []string
	// onAll: the group spans the whole 3-node cluster, so the node must be one of its peers.
	check := func(what string, ci *jetstream.ClusterInfo, onAll bool) {
		if ci == nil || ci.Leader == "" {
			lagging = append(lagging, what+": no leader")
			return
		}
		if ci.Leader == node {
			return
		}
		for _, r := range ci.Replicas {
			if r.Name == node {
				if !r.Current || r.Offline || r.Lag > 0 {
					lagging = append(lagging, fmt.Sprintf("%s: current %v, offline %v, lag %d", what, r.Current, r.Offline, r.Lag))
				}
				return
			}
		}
		if onAll {
			lagging = append(lagging, what+": not a peer yet")
		}
	}
	names := c.js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		return []string{"stream list: " + err.Error()}
	}
	sort.Strings(streams)
	for _, n := range streams {
		s, err := c.js.Stream(ctx, n)
		if err != nil {
			lagging = append(lagging, n+": "+err.Error())
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			lagging = append(lagging, n+": "+err.Error())
			continue
		}
		if info.Config.Replicas < 2 {
			continue
		}
		check("stream "+n, info.Cluster, info.Config.Replicas >= 3)
		cons := s.ListConsumers(ctx)
		for ci := range cons.Info() {
			r := ci.Config.Replicas
			if r == 0 { // inherits the stream's
				r = info.Config.Replicas
			}
			if r < 2 {
				continue
			}
			check("consumer "+n+"/"+ci.Name, ci.Cluster, r >= 3)
		}
		if err := cons.Err(); err != nil {
			lagging = append(lagging, n+" consumers: "+err.Error())
		}
	}
	return lagging
}
