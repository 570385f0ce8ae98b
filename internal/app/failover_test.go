package app_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/app"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A cluster URL as an operator writes it opens a cluster client that the limiter and the
// scheduler work through.
func TestOpenRedisCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	rdb, err := app.OpenRedis(c.URL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("%s opened a %T", c.URL(), rdb)
	}
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	lim, err := bucket.NewRedis(rdb, bucket.RedisConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	limits := []bucket.Limit{{Algorithm: bucket.SlidingWindowLog, Rate: 2, Interval: time.Minute}, {Algorithm: bucket.TokenBucket, Rate: 5, Interval: time.Second}}
	now := time.Now()
	for i, want := range []bool{true, true, false} {
		if r, err := lim.Allow(ctx, "k", limits, 1, now); err != nil || r.Allowed != want {
			t.Fatalf("decision %d: %+v %v, want allowed=%v", i, r, err, want)
		}
	}
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkDueAt(ctx, "orders", now, "m-1", "m-2"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, "orders", now, queue.ClaimRequest{Owner: "d", Max: 10, Lease: time.Minute, Outflow: queue.Outflow{Every: time.Second}})
	if err != nil || len(got.Claims) != 2 {
		t.Fatalf("claim: %+v %v", got, err)
	}
}

// The master dies (SIGKILL) while writers using a client opened from the Sentinel URL
// keep it busy; the sentinels promote the replica and the same client goes on writing to
// it. Logs how long writes failed and how many acknowledged writes the promotion lost
// (replication is asynchronous: a write acknowledged by the master in the instant before
// it died may not have reached the replica). The writers are 4 goroutines writing as fast
// as they can, so writes are in flight when the master dies.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{DownAfter: time.Second, FailoverTimeout: 5 * time.Second})
	rdb, err := app.OpenRedis(s.URL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	key := redistest.Prefix(t) + "n"

	type write struct {
		at  time.Time // when the answer came
		val int64     // INCR's answer; 0: failed
	}
	const writers = 4
	var (
		mu     sync.Mutex
		writes []write
		acked  int
	)
	started := make(chan struct{}) // 1000 writes acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				v, err := rdb.Incr(ctx, key).Result()
				cancel()
				mu.Lock()
				writes = append(writes, write{time.Now(), v})
				if err == nil {
					if acked++; acked == 1000 {
						close(started)
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no 1000 writes through the Sentinel client in 10 s")
	}
	killed := time.Now()
	s.Master.Stop() // SIGKILL; returns once the process is gone
	dead := time.Now()
	t.Logf("master %s killed", s.Master.Addr())

	// Wait for the sentinels to name the replica, and for the client to write again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var promoted time.Time
	for {
		if a, err := s.MasterAddr(ctx); err == nil && a == s.Replica.Addr() {
			promoted = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the sentinels did not promote the replica within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resumed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range writes {
			if w.val != 0 && w.at.After(promoted) {
				return true
			}
		}
		return false
	}
	for !resumed() {
		if ctx.Err() != nil {
			t.Fatalf("the client did not write again within 30 s of the kill (promotion after %v)", promoted.Sub(killed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Keep writing for a moment on the new master, then stop.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()

	// Acknowledgements until the old master was gone came from it; after the promotion,
	// from the new master, which went on from what it had replicated (R): its first answer
	// is R+1. Acknowledged and lost: the old master's answers above R.
	var maxOld, last int64
	minNew := int64(-1)
	var lastOldAt, firstFail, firstNewAt time.Time
	failed := 0
	for _, w := range writes {
		switch {
		case w.val == 0:
			failed++
			if firstFail.IsZero() {
				firstFail = w.at
			}
		case !w.at.After(dead):
			maxOld, lastOldAt = max(maxOld, w.val), w.at
		case w.at.After(promoted):
			if minNew < 0 || w.val < minNew {
				minNew = w.val
			}
			if firstNewAt.IsZero() {
				firstNewAt = w.at
			}
		default:
			t.Errorf("INCR answered %d between the master's death and the promotion", w.val)
		}
		if w.val != 0 {
			last = max(last, w.val)
		}
	}
	if minNew < 0 || firstFail.IsZero() {
		t.Fatalf("no write failed, or none after the failover (%d writes)", len(writes))
	}
	lost := maxOld - (minNew - 1)
	if lost < 0 {
		t.Errorf("the new master answered %d first, the old one %d last: it ran ahead of its master?", minNew, maxOld)
	}
	t.Logf("failover: sentinels promoted %s %.2fs after the master's SIGKILL; writes failed from %.3fs to %.2fs after the kill (%d failed attempts); %d of %d writes acknowledged by the old master (the last one answered %+.1f ms from the kill) lost to asynchronous replication",
		s.Replica.Addr(), promoted.Sub(killed).Seconds(), firstFail.Sub(killed).Seconds(), firstNewAt.Sub(killed).Seconds(), failed, lost, maxOld, float64(lastOldAt.Sub(killed).Microseconds())/1000)

	// The writes after the failover are on the former replica, now a master.
	rc := s.Replica.Client(t)
	info, err := rc.Info(context.Background(), "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("former replica: %v %q", err, info)
	}
	if v, err := rc.Get(context.Background(), key).Int64(); err != nil || v != last {
		t.Fatalf("former replica holds %d (%v), the client's last INCR answered %d", v, err, last)
	}
	if err := rdb.Set(context.Background(), key+":after", 1, 0).Err(); err != nil {
		t.Fatalf("write after the failover: %v", err)
	}
}
