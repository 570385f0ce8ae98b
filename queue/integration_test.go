package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// TestEmptyKeyRaceWithRealEnqueues runs producers (publish, then MarkDue, as the ingress
// does) against two drain loops that keep finding keys empty and dropping them. A mark lost
// to that race would strand a key's messages: the drain would never finish. The window is
// narrow, so this is a smoke test with real concurrency; the exact interleavings are pinned
// by TestEmptyKeyRemovalNeverLosesAConcurrentMark.
func TestEmptyKeyRaceWithRealEnqueues(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 10000)
	s := newSchedulers(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const producers, each = 4, 60
	keys := []string{"a", "a.b", "*"}
	var produced, delivered atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := keys[(p+i)%len(keys)]
				if _, err := q.Enqueue(ctx, rule, msg(key, "{}")); err != nil {
					t.Error(err)
					return
				}
				produced.Add(1)
				if err := s.Claims.MarkDue(ctx, rule, key); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(2 * time.Millisecond) // let the drains empty keys between messages
			}
		}()
	}
	producing := make(chan struct{})
	go func() { wg.Wait(); close(producing) }()
	var empties atomic.Int64
	drain := func(owner string) {
		for ctx.Err() == nil {
			select {
			case <-producing:
				if delivered.Load() == producers*each {
					return
				}
			default:
			}
			c, err := s.Claims.Claim(ctx, rule, time.Now(), queue.ClaimRequest{Owner: owner, Max: 3, Lease: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			for _, cl := range c.Claims {
				mode := queue.Released
				p, err := q.Pop(ctx, rule, cl.Key)
				switch {
				case errors.Is(err, queue.ErrEmpty):
					mode = queue.Emptied
					empties.Add(1)
				case err != nil:
					t.Error(err)
					return
				default:
					if err := q.Delete(ctx, rule, p.Seq); err != nil {
						t.Errorf("delete: %v (two drains popped one key?)", err)
						return
					}
					delivered.Add(1)
				}
				if _, err := s.Claims.Release(ctx, rule, owner, 0, queue.Release{Key: cl.Key, Mode: mode}); err != nil {
					t.Error(err)
					return
				}
			}
			if len(c.Claims) == 0 {
				time.Sleep(200 * time.Microsecond) // the scenario: a drainer that found nothing claims again shortly
			}
		}
	}
	var dw sync.WaitGroup
	for i := 0; i < 2; i++ {
		dw.Add(1)
		go func() { defer dw.Done(); drain(fmt.Sprintf("d%d", i)) }()
	}
	dw.Wait()
	if delivered.Load() != producers*each {
		t.Fatalf("delivered %d of %d (produced %d): a key was stranded", delivered.Load(), producers*each, produced.Load())
	}
	if empties.Load() == 0 {
		t.Log("no key was ever found empty: the race was not exercised this run")
	}
	if st, _ := q.Stats(ctx, rule); st.Msgs != 0 {
		t.Fatalf("%d messages left", st.Msgs)
	}
	t.Logf("%d deliveries, %d empty pops", delivered.Load(), empties.Load())
}

func TestReconcileRepairsStrandedKeys(t *testing.T) {
	t.Parallel()
	q, rule, _ := newQueues(t, 10)
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	for _, k := range []string{"a", "b.c", ">"} {
		if _, err := q.Enqueue(ctx, rule, msg(k, "{}")); err != nil {
			t.Fatal(err)
		}
	}
	// Only "a" was marked: the ingress crashed before marking the others.
	s.Claims.MarkDueAt(ctx, rule, t0, "a")
	// An earlier version's single depth hash, which this version neither reads nor writes.
	rdb := testRedis(t)
	legacy := s.PartKey(rule, 0, "depth")
	rdb.HSet(ctx, legacy, "a", 7, "gone", 3)
	if r, err := queue.CheckSchedule(ctx, q, s, rule); err != nil || r.Deficit() != 2 {
		t.Fatalf("check: deficit %d, %v; want 2", r.Deficit(), err)
	}
	// Another process is scanning: this one does not scan too.
	unlock, ok, err := s.HoldReconcileLock(ctx, rule)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if r, err := queue.Reconcile(ctx, q, s, rule, t0, false); err != nil || !r.Busy || r.Scanned {
		t.Fatalf("reconcile under another's lock: %+v, %v", r, err)
	}
	unlock()
	r, err := queue.Reconcile(ctx, q, s, rule, t0, false)
	if err != nil || !r.Scanned || r.Repaired != 2 || r.Keys != 3 {
		t.Fatalf("reconcile: %+v, %v", r, err)
	}
	r, err = queue.Reconcile(ctx, q, s, rule, t0, false)
	if err != nil || r.Scanned || r.Repaired != 0 {
		t.Fatalf("second reconcile scanned again: %+v, %v", r, err)
	}
	for _, k := range []string{"a", "b.c", ">"} {
		if d, err := s.DepthForTest(ctx, rule, k); err != nil || d != 1 {
			t.Fatalf("depth counter of %q after the scan: %d, %v; want 1", k, d, err)
		}
	}
	if n, err := rdb.Exists(ctx, legacy).Result(); err != nil || n != 0 {
		t.Fatalf("the earlier versions' depth hash is still there after the scan (%d, %v)", n, err)
	}
	c, err := s.Claims.Claim(ctx, rule, t0, queue.ClaimRequest{Owner: "A", Max: 10, Lease: time.Minute})
	if err != nil || len(c.Claims) != 3 {
		t.Fatalf("claim after reconcile: %v, %v", claimKeys(t, c), err)
	}
	// Claimed keys count as scheduled: no scan while drainers hold them.
	if r, _ := queue.Reconcile(ctx, q, s, rule, t0, false); r.Scanned {
		t.Fatalf("reconcile scanned while all keys were claimed: %+v", r)
	}
	// A forced run scans, and only flags claimed keys (never makes them claimable twice).
	if r, _ := queue.Reconcile(ctx, q, s, rule, t0, true); !r.Scanned || r.Repaired != 0 {
		t.Fatalf("forced reconcile: %+v", r)
	}
}
