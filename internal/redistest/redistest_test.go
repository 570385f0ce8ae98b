package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestSharedServerAndPrefixes(t *testing.T) {
	t.Parallel()
	s := redistest.Shared(t)
	c := s.Client(t)
	ctx := context.Background()
	p1, p2 := redistest.Prefix(t), redistest.Prefix(t)
	if p1 == p2 {
		t.Fatalf("prefixes repeat: %q", p1)
	}
	if err := c.Set(ctx, p1+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, p2+"k").Result(); got != "" {
		t.Fatalf("prefix %q sees %q's data", p2, p1)
	}
}

func TestRestartKeepsAddressAndAppendOnlyData(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{TCP: true, AppendOnly: true})
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// AOF fsyncs every second; force it so the crash below cannot lose the write.
	if err := c.Do(ctx, "BGREWRITEAOF").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, _ := c.Info(ctx, "persistence").Result()
		if contains(info, "aof_rewrite_in_progress:0") && contains(info, "aof_rewrite_scheduled:0") {
			break
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// The shared cluster spreads keys over its masters, runs a script whose keys share a hash
// tag, and refuses one whose keys do not (what every sluice script must avoid).
func TestSharedCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := redistest.SharedCluster(t)
	t.Logf("cluster of %d masters and %d replicas ready in %v: %s", len(c.Masters), len(c.Replicas), time.Since(start), c.URL())
	cl := c.Client(t)
	ctx := context.Background()
	p := redistest.Prefix(t)
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("%sk%d", p, i)
		if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		m, err := cl.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("30 keys landed on %d masters, want 3", len(masters))
	}
	same := redis.NewScript(`redis.call('SET', KEYS[1], 1) return redis.call('INCR', KEYS[2])`)
	if n, err := same.Run(ctx, cl, []string{p + "{a}x", p + "{a}y"}).Int(); err != nil || n != 1 {
		t.Errorf("script on one slot: %d %v", n, err)
	}
	err := same.Run(ctx, cl, []string{p + "{a}x", p + "{b}y"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("script over two slots: %v, want CROSSSLOT", err)
	}
	for _, r := range c.Replicas {
		info, err := r.Client(t).Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:slave") {
			t.Errorf("replica %s: %v %q", r.Addr(), err, info)
		}
	}
}

// The sentinels see the master and its replica, and the URL names all of them.
func TestStartSentinels(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{})
	t.Logf("master, replica and %d sentinels ready in %v: %s", len(s.Sentinels), time.Since(start), s.URL())
	ctx := context.Background()
	if a, err := s.MasterAddr(ctx); err != nil || a != s.Master.Addr() {
		t.Fatalf("sentinels say the master is %q (%v), want %s", a, err, s.Master.Addr())
	}
	if !strings.HasPrefix(s.URL(), "redis+sentinel://"+s.Sentinels[0].Addr()+"?master_name=sluice&addr=") {
		t.Errorf("URL %s", s.URL())
	}
}
