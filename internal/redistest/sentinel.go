package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions configure a private Sentinel deployment.
type SentinelOptions struct {
	// MasterName is the name the sentinels monitor the master under. Default "sluice".
	MasterName string
	// Sentinels is the number of sentinels; the quorum is a majority of them. Default 3.
	Sentinels int
	// DownAfter is Sentinel's down-after-milliseconds: how long the master may not answer
	// before a sentinel thinks it down. Default 1s (Redis's default is 30s).
	DownAfter time.Duration
	// FailoverTimeout is Sentinel's failover-timeout. Default 5s (Redis's is 3 minutes).
	FailoverTimeout time.Duration
}

// Sentinels is a master, one replica and a number of sentinels monitoring them, each a
// private redis-server process on a free 127.0.0.1 port (sentinels are redis-server in
// sentinel mode, so nothing but redis-server is needed).
type Sentinels struct {
	opts      SentinelOptions
	Master    *Server // the master at start; after a failover, Replica is
	Replica   *Server
	Sentinels []*Server
}

// StartSentinels starts a master, its replica and the sentinels, and returns once the
// replica is in sync and every sentinel knows the replica and the other sentinels (so a
// failover can be authorised at once). Everything is stopped when the test ends.
func StartSentinels(tb testing.TB, opts SentinelOptions) *Sentinels {
	tb.Helper()
	if opts.MasterName == "" {
		opts.MasterName = "sluice"
	}
	if opts.Sentinels <= 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout <= 0 {
		opts.FailoverTimeout = 5 * time.Second
	}
	s := &Sentinels{opts: opts}
	tb.Cleanup(s.Stop)
	dir := tb.TempDir()
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			tb.Fatal(err)
		}
		return d
	}
	fast := []string{"--repl-diskless-sync-delay", "0"}
	var err error
	if s.Master, err = start(sub("master"), Options{TCP: true, args: fast}); err != nil {
		tb.Fatalf("redistest: sentinel master: %v", err)
	}
	host, port := splitAddr(s.Master.Addr())
	if s.Replica, err = start(sub("replica"), Options{TCP: true, args: append([]string{"--replicaof", host, port}, fast...)}); err != nil {
		tb.Fatalf("redistest: sentinel replica: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := redis.NewClient(s.Replica.Options())
	defer rc.Close()
	if err := waitFor(ctx, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}); err != nil {
		tb.Fatalf("redistest: sentinel replica never synced: %v", err)
	}
	quorum := opts.Sentinels/2 + 1
	for i := 0; i < opts.Sentinels; i++ {
		d := sub("sentinel" + strconv.Itoa(i))
		conf := filepath.Join(d, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
			"sentinel down-after-milliseconds %[1]s %[5]d\n"+
			"sentinel failover-timeout %[1]s %[6]d\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			opts.MasterName, host, port, quorum, opts.DownAfter.Milliseconds(), opts.FailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
		sn, err := start(d, Options{TCP: true, sentinelConf: conf})
		if err != nil {
			tb.Fatalf("redistest: sentinel %d: %v", i, err)
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		err := waitFor(ctx, func() bool {
			m, err := c.Master(ctx, opts.MasterName).Result()
			return err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == strconv.Itoa(opts.Sentinels-1)
		})
		c.Close()
		if err != nil {
			tb.Fatalf("redistest: sentinel %s never saw the replica and the other sentinels: %v", sn.Addr(), err)
		}
	}
	return s
}

// MasterName is the monitored master's name.
func (s *Sentinels) MasterName() string { return s.opts.MasterName }

// Addrs are the sentinels' host:port addresses.
func (s *Sentinels) Addrs() []string {
	var a []string
	for _, sn := range s.Sentinels {
		a = append(a, sn.Addr())
	}
	return a
}

// URL is a -redis URL of the deployment: redis+sentinel://s1?master_name=…&addr=s2&addr=s3.
func (s *Sentinels) URL() string {
	a := s.Addrs()
	u := "redis+sentinel://" + a[0] + "?master_name=" + s.opts.MasterName
	for _, x := range a[1:] {
		u += "&addr=" + x
	}
	return u
}

// MasterAddr asks the first sentinel that answers where the master is now.
func (s *Sentinels) MasterAddr(ctx context.Context) (string, error) {
	var err error
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		var a []string
		a, err = c.GetMasterAddrByName(ctx, s.opts.MasterName).Result()
		c.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
	}
	return "", fmt.Errorf("no sentinel answered: %v", err)
}

// Stop kills every process. Safe to call twice.
func (s *Sentinels) Stop() {
	for _, sn := range s.Sentinels {
		sn.Stop()
	}
	if s.Replica != nil {
		s.Replica.Stop()
	}
	if s.Master != nil {
		s.Master.Stop()
	}
}
