package process_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A cluster URL as an operator writes it opens a cluster client that the limiter and the
// scheduler work through.
func TestOpenRedisCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	rdb, err := process.OpenRedis(c.URL(), 0)
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
	if _, err := s.Claims.MarkDueAt(ctx, "orders", now, "m-1", "m-2"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claims.Claim(ctx, "orders", now, queue.ClaimRequest{Owner: "d", Max: 10, Lease: time.Minute, Outflow: queue.Outflow{Every: time.Second}})
	if err != nil || len(got.Claims) != 2 {
		t.Fatalf("claim: %+v %v", got, err)
	}
}

// writers are goroutines writing INCR key as fast as they can through one client, so
// writes are in flight when a master dies; every answer is recorded.
type writers struct {
	mu      sync.Mutex
	writes  []write
	acked   int
	started chan struct{} // closed at 1000 acknowledged writes
	stop    chan struct{}
	wg      sync.WaitGroup
}

type write struct {
	at  time.Time // when the answer came
	val int64     // INCR's answer; 0: failed
}

func startWriters(t *testing.T, rdb redis.UniversalClient, key string, n int) *writers {
	w := &writers{started: make(chan struct{}), stop: make(chan struct{})}
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				v, err := rdb.Incr(ctx, key).Result()
				cancel()
				w.mu.Lock()
				w.writes = append(w.writes, write{time.Now(), v})
				if err == nil {
					if w.acked++; w.acked == 1000 {
						close(w.started)
					}
				}
				w.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // the scenario: a client retrying a failed write
				}
			}
		}()
	}
	t.Cleanup(w.halt)
	select {
	case <-w.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no 1000 writes in 10 s")
	}
	return w
}

func (w *writers) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// ackedAfter reports whether a write was acknowledged after t.
func (w *writers) ackedAfter(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.writes {
		if x.val != 0 && x.at.After(t) {
			return true
		}
	}
	return false
}

// failoverStats stops the writers and sums them up. Acknowledgements until dead (the old
// master was gone) came from it; after promoted, from the new master, which went on from
// what it had replicated (R): its first answer is R+1. Acknowledged and lost: the old
// master's answers above R.
type failoverStats struct {
	maxOld, lost          int64
	lastOldAt             time.Time
	firstFail, firstNewAt time.Time
	failed                int
}

func (w *writers) stats(t *testing.T, killed, dead, promoted time.Time) failoverStats {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // writes on the new master for a moment
	w.halt()
	var st failoverStats
	minNew := int64(-1)
	for _, x := range w.writes {
		switch {
		case x.val == 0:
			st.failed++
			if st.firstFail.IsZero() {
				st.firstFail = x.at
			}
		case !x.at.After(dead):
			st.maxOld, st.lastOldAt = max(st.maxOld, x.val), x.at
		default:
			// Answered after the old master died: by the new one. The client may learn of the
			// promotion a little before the test's polling of the sentinels does.
			if minNew < 0 || x.val < minNew {
				minNew = x.val
			}
			if st.firstNewAt.IsZero() {
				st.firstNewAt = x.at
			}
		}
	}
	if minNew < 0 || st.firstFail.IsZero() {
		t.Fatalf("no write failed, or none after the failover (%d writes)", len(w.writes))
	}
	// The new master may start above the old one's last answer: an INCR the old master ran
	// and replicated whose answer never reached the client (it died in between). Those are
	// not losses; more than a few would mean the new master ran ahead.
	if st.lost = st.maxOld - (minNew - 1); st.lost < 0 {
		if -st.lost > 8 {
			t.Errorf("the new master answered %d first, the old one %d last: it ran ahead of its master?", minNew, st.maxOld)
		}
		st.lost = 0
	}
	return st
}

// The master dies (SIGKILL) while writers using a client opened from the Sentinel URL
// keep it busy; the sentinels promote the replica and the same client goes on writing to
// it. Logs how long writes failed and how many acknowledged writes the promotion lost
// (replication is asynchronous: a write acknowledged by the master in the instant before
// it died may not have reached the replica).
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{DownAfter: time.Second, FailoverTimeout: 5 * time.Second})
	rdb, err := process.OpenRedis(s.URL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	key := redistest.Prefix(t) + "n"
	w := startWriters(t, rdb, key, 4)
	killed := time.Now()
	s.Master.Stop() // SIGKILL; returns once the process is gone
	dead := time.Now()

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
		time.Sleep(20 * time.Millisecond) // the resolution of the measured promotion time: not waittest's coarser polling
	}
	for !w.ackedAfter(promoted) {
		if ctx.Err() != nil {
			t.Fatalf("the client did not write again within 30 s of the kill (promotion after %v)", promoted.Sub(killed))
		}
		time.Sleep(20 * time.Millisecond) // the resolution of the measured time to write again
	}
	st := w.stats(t, killed, dead, promoted)
	last := st.maxOld
	for _, x := range w.writes {
		last = max(last, x.val)
	}
	t.Logf("failover: sentinels promoted %s %.2fs after the master's SIGKILL; writes failed from %.3fs to %.2fs after the kill (%d failed attempts); %d of %d writes acknowledged by the old master (the last one answered %+.1f ms from the kill) lost to asynchronous replication",
		s.Replica.Addr(), promoted.Sub(killed).Seconds(), st.firstFail.Sub(killed).Seconds(), st.firstNewAt.Sub(killed).Seconds(), st.failed, st.lost, st.maxOld, float64(st.lastOldAt.Sub(killed).Microseconds())/1000)

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

// A cluster master dies (SIGKILL) while writers using a client opened from the cluster URL
// write a key of its slots; the cluster promotes its replica and the client follows within
// about a second (reloadOnNodeFailure, ClusterStateReloadInterval) — go-redis alone keeps
// the dead address for up to its 60 s slot-map refresh.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	rdb, err := process.OpenRedis(c.URL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc := rdb.(*redis.ClusterClient)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A key on the first master, which dies; its replica is Replicas[0].
	var key string
	prefix := redistest.Prefix(t)
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("%sn%d", prefix, i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == c.Masters[0].Addr() {
			key = k
		}
	}
	w := startWriters(t, rdb, key, 4)
	killed := time.Now()
	c.Masters[0].Stop()
	dead := time.Now()

	rep := c.Replicas[0].Client(t)
	var promoted time.Time
	for {
		info, err := rep.Info(ctx, "replication").Result()
		ci, err2 := rep.ClusterInfo(ctx).Result()
		if err == nil && err2 == nil && strings.Contains(info, "role:master") && strings.Contains(ci, "cluster_state:ok") {
			promoted = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the cluster did not promote the replica within 30 s")
		}
		time.Sleep(20 * time.Millisecond) // the resolution of the measured promotion time: not waittest's coarser polling
	}
	for !w.ackedAfter(promoted) {
		if ctx.Err() != nil {
			t.Fatalf("the client did not write again within 30 s of the kill (promotion after %v)", promoted.Sub(killed))
		}
		time.Sleep(20 * time.Millisecond) // the resolution of the measured time to write again
	}
	st := w.stats(t, killed, dead, promoted)
	t.Logf("failover: the cluster promoted %s %.2fs after its master's SIGKILL; the client wrote again %.2fs after the promotion (writes failed from %.3fs to %.2fs after the kill, %d failed attempts); %d of %d writes acknowledged by the old master lost to asynchronous replication",
		c.Replicas[0].Addr(), promoted.Sub(killed).Seconds(), st.firstNewAt.Sub(promoted).Seconds(), st.firstFail.Sub(killed).Seconds(), st.firstNewAt.Sub(killed).Seconds(), st.failed, st.lost, st.maxOld)
	if d := st.firstNewAt.Sub(promoted); d > 3*time.Second {
		t.Errorf("the client wrote again %v after the promotion, want about a second (slot map reloaded on failure or every second)", d)
	}
	if v, err := rep.Get(context.Background(), key).Int64(); err != nil || v < st.maxOld-st.lost {
		t.Fatalf("promoted replica holds %d (%v)", v, err)
	}
}
