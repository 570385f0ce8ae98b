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

// The master dies (SIGKILL) while a client opened from the Sentinel URL writes; the
// sentinels promote the replica and the same client goes on writing to it. Logs how long
// writes failed and how many acknowledged writes the promotion lost (replication is
// asynchronous: a write acknowledged by the master in the instant before it died may not
// have reached the replica).
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
		at  time.Time
		val int64 // INCR's answer; 0: failed
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	started := make(chan struct{}) // 50 writes acknowledged
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		acked := 0
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
			mu.Unlock()
			if err == nil {
				if acked++; acked == 50 {
					close(started)
				}
				time.Sleep(2 * time.Millisecond) // ~400 writes/s: a steady writer, not a flood
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no 50 writes through the Sentinel client in 10 s")
	}
	killed := time.Now()
	s.Master.Stop() // SIGKILL
	t.Logf("master %s killed", s.Master.Addr())

	// Wait for the sentinels to name the replica, and for the client to write again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var promoted time.Duration
	for {
		if a, err := s.MasterAddr(ctx); err == nil && a == s.Replica.Addr() {
			promoted = time.Since(killed)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the sentinels did not promote the replica within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// resumed: the first acknowledged write after a failed one after the kill.
	resumed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		failed := false
		for _, w := range writes {
			if w.at.Before(killed) {
				continue
			}
			if w.val == 0 {
				failed = true
			} else if failed {
				return true
			}
		}
		return false
	}
	for !resumed() {
		if ctx.Err() != nil {
			t.Fatalf("the client did not write again within 30 s of the kill (promotion after %v)", promoted)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Keep writing for a moment on the new master, then stop.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-done

	var lastBefore, firstAfter, last int64
	var firstFail, firstOK time.Time
	failed := 0
	for _, w := range writes {
		switch {
		case w.val == 0:
			failed++
			if firstFail.IsZero() && w.at.After(killed) {
				firstFail = w.at
			}
		case firstFail.IsZero():
			lastBefore = w.val
		default:
			if firstOK.IsZero() {
				firstOK, firstAfter = w.at, w.val
			}
			if w.val <= last {
				t.Errorf("after the failover INCR answered %d after %d", w.val, last)
			}
		}
		if w.val != 0 {
			last = w.val
		}
	}
	if firstOK.IsZero() {
		t.Fatal("no write after the failover")
	}
	lost := lastBefore - (firstAfter - 1)
	if lost < 0 {
		t.Errorf("INCR answered %d after the failover, %d before: the replica ran ahead of its master?", firstAfter, lastBefore)
	}
	t.Logf("failover: sentinels promoted %s %.2fs after the master's SIGKILL; writes failed for %.2fs (%d failed attempts, first failure %.2fs after the kill), the client resumed %.2fs after the kill; %d acknowledged writes lost to asynchronous replication (%d acknowledged before the kill)",
		s.Replica.Addr(), promoted.Seconds(), firstOK.Sub(firstFail).Seconds(), failed, firstFail.Sub(killed).Seconds(), firstOK.Sub(killed).Seconds(), lost, lastBefore)

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
