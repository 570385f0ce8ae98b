package integration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// Redis high availability under load: the whole deployment (2 ingress, 2 drainers) runs on
// Redis through Sentinel or on a Redis Cluster, and the Redis master that holds the queue
// rule's scheduler state is SIGKILLed. Its replica is promoted (by the sentinels, or by the
// cluster itself), the processes follow it with the clients they opened from -redis, and
// every acknowledged message must still be delivered, in order, at the outflow.

func TestRedisFailover(t *testing.T) {
	runFaultTable(t, fastFaults, "faults-redis-ha.md", []fault{
		{"SentinelMasterKilled", faultSentinelFailover},
		{"ClusterMasterKilled", faultClusterFailover},
	})
}

func TestSoakRedisFailover(t *testing.T) {
	if os.Getenv("SLUICE_SOAK") == "" {
		t.Skip("long fault runs: SLUICE_SOAK=1 (make soak)")
	}
	runFaultTable(t, soakFaults, "faults-redis-ha-soak.md", []fault{
		{"SentinelMasterKilled", faultSentinelFailover},
		{"ClusterMasterKilled", faultClusterFailover},
	})
}

func faultSentinelFailover(t *testing.T, p faultParams) faultRow {
	c, l := faultSetupWith(t, p, clusterOptions{rules: faultRules, redisSentinel: true})
	s := c.sentinels
	return redisFailover(t, p, c, l, "Redis master SIGKILLed, Sentinel promotes the replica",
		func() { s.Master.Stop() },
		func(ctx context.Context) bool {
			a, err := s.MasterAddr(ctx)
			return err == nil && a == s.Replica.Addr()
		})
}

func faultClusterFailover(t *testing.T, p faultParams) faultRow {
	c, l := faultSetupWith(t, p, clusterOptions{rules: faultRules, redisCluster: true})
	rc := redis.NewClusterClient(c.redisCl.Options())
	defer rc.Close()
	// The master of the queue rule's slot (its due set, leases, depths).
	m, err := rc.MasterForKey(t.Context(), "sl:{"+queue.RuleToken("faults")+"}:due")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(c.redisCl.Masters, func(s *redistest.Server) bool { return s.Addr() == m.Options().Addr })
	if i < 0 {
		t.Fatalf("master %s of the rule's slot is not one of the cluster's", m.Options().Addr)
	}
	master, replica := c.redisCl.Masters[i], c.redisCl.Replicas[i]
	rep := redis.NewClient(replica.Options())
	defer rep.Close()
	return redisFailover(t, p, c, l, "Redis Cluster: master of the queue's slot SIGKILLed, its replica takes over",
		func() { master.Stop() },
		func(ctx context.Context) bool {
			info, err := rep.Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "role:master") {
				return false
			}
			ci, err := rep.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(ci, "cluster_state:ok")
		})
}

// redisFailover kills the master (kill) under load, waits until promoted says the replica
// took over, and measures what the failover cost: the admission (which must not stop:
// queue capacity is JetStream's and limits go local) and the deliveries (drainers pause
// while Redis is unreachable and resume on the promoted replica).
func redisFailover(t *testing.T, p faultParams, c *cluster, l *loadGen, name string, kill func(), promoted func(context.Context) bool) faultRow {
	killed := time.Now()
	kill()
	if !waittest.Within(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return promoted(ctx)
	}) {
		t.Fatalf("%s: no promotion within 60 s", name)
	}
	promotedAt := time.Now()
	if !waittest.Within(60*time.Second, func() bool { return countIn(c.sink.All(), promotedAt, time.Now().Add(time.Second)) > 0 }) {
		t.Errorf("no delivery within 60 s of the promotion")
	}
	var firstAfter time.Time
	for _, d := range c.sink.All() {
		if d.At.After(promotedAt) {
			firstAfter = d.At
			break
		}
	}
	// The longest time without any delivery, around the kill.
	var gap time.Duration
	prev := killed.Add(-time.Second)
	for _, d := range c.sink.All() {
		if d.At.Before(prev) || d.At.After(firstAfter) {
			continue
		}
		gap = max(gap, d.At.Sub(prev))
		prev = d.At
	}
	p50, worst := l.latency(killed, promotedAt)
	ackGap := l.longestAckGap(killed, promotedAt)
	acked := 0
	l.mu.Lock()
	for _, a := range l.ackAt {
		if a.After(killed) && a.Before(promotedAt) {
			acked++
		}
	}
	l.mu.Unlock()
	if acked == 0 {
		t.Errorf("no message acknowledged between the kill and the promotion (%v): admission must not need Redis", promotedAt.Sub(killed))
	}
	time.Sleep(p.after) // the scenario: the load runs on for p.after
	// Replication is asynchronous: a lease write the old master had not passed on is lost, and
	// a key can be claimed again while its first drainer still delivers it. That is the
	// failover's cost, counted here (the sink can refuse the stale call by its Sluice-Fence).
	t.Logf("%s: killed at %s, promoted at %s", name, killed.UTC().Format("15:04:05.000"), promotedAt.UTC().Format("15:04:05.000"))
	v, closeKeys, twoFences := faultFinishCounted(t, p, c, l, name)
	return faultRow{Fault: name, V: v, Recovery: gap,
		What: "longest time without any delivery across the failover",
		Note: fmt.Sprintf("promoted %.1f s after the kill; first delivery %.1f s after the kill; %d messages acknowledged meanwhile (admission p50 %v, max %v, longest time without a 202 %.1f s); %d keys with two deliveries closer than the outflow interval, %d of them under two fences (two owners: lost lease writes; under one fence: one owner catching up on its grid, or arrival jitter)",
			promotedAt.Sub(killed).Seconds(), firstAfter.Sub(killed).Seconds(), acked, p50.Round(time.Millisecond), worst.Round(time.Millisecond), ackGap.Seconds(), closeKeys, twoFences)}
}
