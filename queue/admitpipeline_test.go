package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// pt0 is the fixed instant the tests admit at; every time is passed in, nothing sleeps on it.
var pt0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// rig is a Batcher with the real Scheduler it writes for, under a per-test prefix.
type rig struct {
	b      *queue.AdmitPipeline
	sched  *queue.Scheduler
	rdb    redis.UniversalClient
	prefix string
}

func newRig(t *testing.T, rdb redis.UniversalClient) rig {
	t.Helper()
	prefix := redistest.Prefix(t)
	sched, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return rig{b: &queue.AdmitPipeline{RDB: rdb, Scheduler: sched, IdempotencyTTL: time.Hour}, sched: sched, rdb: rdb, prefix: prefix}
}

func sharedRig(t *testing.T) rig { return newRig(t, pipelineRedis(t)) }

// count is a Count that waits for its answer.
func (r rig) count(t *testing.T, rule, key string, capacity int64, now time.Time) (int64, time.Time) {
	t.Helper()
	depth, next, err := r.b.Count(rule, key, capacity, now).Wait()
	if err != nil {
		t.Fatalf("count %s/%s: %v", rule, key, err)
	}
	return depth, next
}

// prodOptions are the client settings of the ingress (app.RedisOptions): an unreachable
// Redis must cost one quick failure, not go-redis's default retries.
func prodOptions(o *redis.Options) *redis.Options {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	o.ContextTimeoutEnabled = true
	o.MaxRetries = 1
	o.DialerRetries, o.DialerRetryTimeout = 1, 10*time.Millisecond
	return o
}

// Many admissions of one key from many goroutines at once: the pipelines never overlap and
// the counter is atomic, so the depths handed out are exactly 1..N, each once; the
// counter ends at N and the key is due once.
func TestConcurrentCountsOfOneKey(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	ctx := context.Background()
	const goroutines, each = 64, 50
	const n = goroutines * each
	depths := make(chan int64, n)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				depth, next, err := r.b.Count("orders", "merchant 7", 1_000_000, pt0).Wait()
				if err != nil {
					t.Error(err)
					return
				}
				if !next.Equal(pt0) {
					t.Errorf("next %v, want %v (every mark was at pt0)", next, pt0)
				}
				depths <- depth
				r.b.Mark("orders", "merchant 7", pt0)
			}
		}()
	}
	wg.Wait()
	close(depths)
	seen := make([]int, n+1)
	for d := range depths {
		if d < 1 || d > n {
			t.Fatalf("depth %d out of 1..%d", d, n)
		}
		seen[d]++
	}
	for d := 1; d <= n; d++ {
		if seen[d] != 1 {
			t.Fatalf("depth %d handed out %d times, want once", d, seen[d])
		}
	}
	// The counter is at n: the next admission is the (n+1)-th. It also waits for every
	// Mark above, which was asked for before it.
	if depth, _ := r.count(t, "orders", "merchant 7", 1_000_000, pt0); depth != n+1 {
		t.Fatalf("depth after %d counts: %d, want %d", n, depth-1, n)
	}
	due, claimed, err := r.sched.Claims.Counts(ctx, "orders")
	if err != nil || due != 1 || claimed != 0 {
		t.Fatalf("Counts: due %d, claimed %d, %v; want 1 due", due, claimed, err)
	}
	if slot, ok, err := r.sched.Meter.NextSlot(ctx, "orders", "merchant 7"); err != nil || !ok || !slot.Equal(pt0) {
		t.Fatalf("NextSlot: %v %v %v, want %v", slot, ok, err, pt0)
	}
	c, err := r.sched.Claims.Claim(ctx, "orders", pt0, queue.ClaimRequest{Owner: "d1", Max: 10, Lease: time.Minute})
	if err != nil || len(c.Claims) != 1 || c.Claims[0].Key != "merchant 7" || !c.Claims[0].Slot.Equal(pt0) {
		t.Fatalf("Claim: %+v, %v; want merchant 7 at %v", c, err, pt0)
	}
}

// Counts of several rules and many keys (the same key names in every rule) share batches;
// each answer belongs to its own (rule, key): its depth is the number of counts of that
// (rule, key) so far (clamped to the rule's capacity), its next the slot that (rule, key)
// alone was given.
func TestCountsOfManyRulesAndKeysInOneBatch(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	ctx := context.Background()
	rules := []struct {
		name     string
		capacity int64
	}{{"orders", 1000}, {"sms.eu", 7}, {"mail/{x}", 1000}}
	const keys, each = 16, 20
	slot := func(ri, k int) time.Time {
		return pt0.Add(time.Hour + time.Duration(ri*keys+k)*time.Second)
	}
	for ri, rule := range rules {
		for k := 0; k < keys; k++ {
			if _, err := r.sched.Claims.MarkDueAt(ctx, rule.name, slot(ri, k), "k"+strconv.Itoa(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for ri, rule := range rules {
		for k := 0; k < keys; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "k" + strconv.Itoa(k)
				for i := int64(1); i <= each; i++ {
					depth, next, err := r.b.Count(rule.name, key, rule.capacity, pt0).Wait()
					if err != nil {
						t.Error(err)
						return
					}
					if want := min(i, rule.capacity); depth != want {
						t.Errorf("%s/%s count %d: depth %d, want %d", rule.name, key, i, depth, want)
					}
					if !next.Equal(slot(ri, k)) {
						t.Errorf("%s/%s count %d: next %v, want its own slot %v", rule.name, key, i, next, slot(ri, k))
					}
				}
			}()
		}
	}
	wg.Wait()
}

// The depth is clamped to [1, capacity], in the answer and in the stored counter.
func TestDepthIsClampedToCapacity(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	for i, want := range []int64{1, 2, 3, 3, 3} {
		if depth, _ := r.count(t, "r", "full", 3, pt0); depth != want {
			t.Fatalf("count %d: depth %d, want %d", i+1, depth, want)
		}
	}
	// Stored as 3, not 5: two messages out leave 1, so the next admission is the 2nd.
	r.b.Undo("r", "full")
	r.b.Undo("r", "full")
	if depth, _ := r.count(t, "r", "full", 3, pt0); depth != 2 {
		t.Fatalf("after 5 counts at capacity 3 and 2 out: depth %d, want 2", depth)
	}
	// A capacity lowered between admissions clamps at once.
	if depth, _ := r.count(t, "r", "full", 1, pt0); depth != 1 {
		t.Fatalf("capacity 1: depth %d, want 1", depth)
	}
	// More counted out than in (lost counts) never answers below 1.
	for i := 0; i < 3; i++ {
		r.b.Undo("r", "lost")
	}
	for i, want := range []int64{1, 2} {
		if depth, _ := r.count(t, "r", "lost", 10, pt0); depth != want {
			t.Fatalf("count %d after 3 out: depth %d, want %d", i+1, depth, want)
		}
	}

	// Many concurrent counts at a small capacity: 1..capacity-1 once each, the rest at capacity.
	const n, capacity = 500, 10
	depths := make(chan int64, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _, err := r.b.Count("r", "flood", capacity, pt0).Wait()
			if err != nil {
				t.Error(err)
			}
			depths <- d
		}()
	}
	wg.Wait()
	close(depths)
	seen := map[int64]int{}
	for d := range depths {
		seen[d]++
	}
	for d := int64(1); d < capacity; d++ {
		if seen[d] != 1 {
			t.Errorf("depth %d handed out %d times, want once", d, seen[d])
		}
	}
	if seen[capacity] != n-capacity+1 || len(seen) != capacity {
		t.Errorf("depths %v: want %d at capacity and nothing else", seen, n-capacity+1)
	}
}

// Undo counts a message out; an Undo asked for before a Count is seen by it, whether or
// not they share a batch, and other keys are untouched.
func TestUndo(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	wait := func(p queue.Pending) int64 {
		t.Helper()
		d, _, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := 0; i < 3; i++ {
		r.count(t, "r", "u", 100, pt0)
	}
	r.b.Undo("r", "u")
	if d := wait(r.b.Count("r", "u", 100, pt0)); d != 3 {
		t.Fatalf("3 in, 1 out, 1 in: depth %d, want 3", d)
	}
	wait(r.b.Count("r", "other", 100, pt0))
	r.b.Undo("r", "u")
	if d := wait(r.b.Count("r", "u", 100, pt0)); d != 3 {
		t.Fatalf("after a second Undo: depth %d, want 3", d)
	}
	if d := wait(r.b.Count("r", "other", 100, pt0)); d != 2 {
		t.Fatalf("other key: depth %d, want 2", d)
	}
}

// Claim maps an idempotency key to the first message that claims it, for the TTL: of many
// concurrent claims of one key exactly one takes it and every other learns its owner; keys
// of other rules are separate; a released key can be claimed again, but only its owner
// releases it.
// TestTakeIdempotencyKey: a claim with a count (CountBatch) and a claim alone (Claim, the
// single admissions' claim lane) take a key once among concurrent claims, tell every other
// the owner, keep it for the TTL and give it up only to its owner's release.
func TestTakeIdempotencyKey(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	t.Run("with a count", func(t *testing.T) {
		testTakeIdempotencyKey(t, r, "", func(rule, k, id string) (owner string, claimed bool, err error) {
			_, o, countErr, err := countClaim(r.b, rule, "a key", 1_000_000, pt0, k, id)
			if countErr != nil {
				return "", false, countErr
			}
			return o, o == id, err
		})
	})
	t.Run("alone", func(t *testing.T) {
		testTakeIdempotencyKey(t, r, "-alone", func(rule, k, id string) (owner string, claimed bool, err error) {
			o, err := r.b.Take(rule, k, id)
			return o, o == id, err
		})
		if d, err := r.rdb.HGet(context.Background(), r.sched.Depths.DepthKey("r-alone", "a key"), "a key").Result(); err == nil {
			t.Errorf("claims alone counted a message: depth %s", d)
		}
	})
}

// testTakeIdempotencyKey is TestTakeIdempotencyKey with claims made by claim, under rules whose
// names end in sfx.
func testTakeIdempotencyKey(t *testing.T, r rig, sfx string, claim func(rule, k, id string) (owner string, claimed bool, err error)) {
	ctx := context.Background()
	const n = 64
	type answer struct {
		owner   string
		claimed bool
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, claimed, err := claim("r"+sfx, "order 991 {x}", "id-"+strconv.Itoa(i))
			if err != nil {
				t.Error(err)
			}
			answers[i] = answer{owner, claimed}
		}()
	}
	wg.Wait()
	winner := ""
	for i, a := range answers {
		if a.claimed {
			if winner != "" {
				t.Fatalf("two claims took the key: %s and id-%d", winner, i)
			}
			winner = a.owner
		}
	}
	if winner == "" {
		t.Fatal("no claim took the key")
	}
	for i, a := range answers {
		if a.owner != winner {
			t.Fatalf("claim %d was told owner %q, the key is %q's", i, a.owner, winner)
		}
	}
	if owner, claimed, err := claim("other-rule"+sfx, "order 991 {x}", "id-x"); err != nil || !claimed || owner != "id-x" {
		t.Fatalf("same key under another rule: %q %v %v, want claimed by id-x", owner, claimed, err)
	}
	keys, err := allKeys(ctx, r.rdb, r.prefix+"sl:{r"+sfx+"}:idem:*")
	if err != nil || len(keys) != 1 {
		t.Fatalf("idempotency keys of rule r%s: %v %v, want exactly one", sfx, keys, err)
	}
	if ttl := r.rdb.PTTL(ctx, keys[0]).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL %v, want the configured hour", ttl)
	}
	// What one key costs, as the README states it: a 36-byte idempotency key (a uuid) mapped
	// to a typical ~55-byte message id.
	uuidKey := "6f1c2a9e-0b7d-4c52-9a51-3e2f1d0c8b7a"
	if _, _, err := claim("orders"+sfx, uuidKey, "01a211f7-9526-7ce1-a644-b40d2e146e5f.orders.kbS00Mg"); err != nil {
		t.Fatal(err)
	}
	size := r.rdb.MemoryUsage(ctx, r.prefix+"sl:{orders"+sfx+"}:idem:"+uuidKey).Val()
	t.Logf("one idempotency key: %d bytes of Redis memory (MEMORY USAGE)", size)
	if size <= 0 || size > 256 {
		t.Errorf("an idempotency key takes %d bytes, want at most 256", size)
	}
	if err := r.sched.Idempotency.Release(ctx, "r"+sfx, "order 991 {x}", "not-the-owner"); err != nil {
		t.Fatal(err)
	}
	if owner, claimed, _ := claim("r"+sfx, "order 991 {x}", "late"); claimed || owner != winner {
		t.Fatalf("after a release by a non-owner: %q %v, want still %q's", owner, claimed, winner)
	}
	if err := r.sched.Idempotency.Release(ctx, "r"+sfx, "order 991 {x}", winner); err != nil {
		t.Fatal(err)
	}
	if owner, claimed, _ := claim("r"+sfx, "order 991 {x}", "late"); !claimed || owner != "late" {
		t.Fatalf("after the owner released it: %q %v, want taken by late", owner, claimed)
	}
}

// Causal order: a Count asked for after a Mark of the same key (Mark does not wait) sees
// the key due — its next is the key's slot, as the scheduler reports it — even when both
// land in one batch: marks are sent before counts.
func TestCountAfterMarkSeesTheKeyDue(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	ctx := context.Background()
	slot := pt0.Add(5 * time.Second) // later than the counts' now: a key not yet due would answer pt0
	const goroutines, each = 32, 20
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("g%d-%d", g, i)
				if d, next, err := r.b.Count("r", key, 100, pt0).Wait(); err != nil || d != 1 || !next.Equal(pt0) {
					t.Errorf("%s first count: %d %v %v; want 1 at %v", key, d, next, err, pt0)
					return
				}
				r.b.Mark("r", key, slot)
				d, next, err := r.b.Count("r", key, 100, pt0).Wait()
				if err != nil || d != 2 {
					t.Errorf("%s second count: %d %v; want 2", key, d, err)
					return
				}
				if !next.Equal(slot) {
					t.Errorf("%s: count after mark answered next %v, want the key's slot %v", key, next, slot)
				}
				if s, ok, err := r.sched.Meter.NextSlot(ctx, "r", key); err != nil || !ok || !s.Equal(next) {
					t.Errorf("%s: NextSlot %v %v %v, count answered %v", key, s, ok, err, next)
				}
			}
		}()
	}
	wg.Wait()

	// A claimed key answers the slot after the claimed one, as NextSlot does.
	if _, err := r.sched.Claims.Claim(ctx, "r", slot, queue.ClaimRequest{Outflow: queue.Outflow{Every: time.Second}, Owner: "d1", Max: 1000, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	res, err := r.b.Count("r", "g0-0", 100, pt0).Result()
	if err != nil || !res.Held {
		t.Fatalf("claimed key: count answered %+v, %v; want Held", res, err)
	}
	next := res.Next
	if s, ok, err := r.sched.Meter.NextSlot(ctx, "r", "g0-0"); err != nil || !ok || !s.Equal(next) || !next.Equal(slot.Add(time.Second)) {
		t.Fatalf("claimed key: count answered %v, NextSlot %v %v %v; want %v", next, s, ok, err, slot.Add(time.Second))
	}
	r.count(t, "r", "fresh", 100, pt0)
	r.b.Mark("r", "fresh", slot)
	if res, err := r.b.Count("r", "fresh", 100, pt0).Result(); err != nil || res.Held || !res.Next.Equal(slot) {
		t.Fatalf("due key: count answered %+v, %v; want not Held, next %v", res, err, slot)
	}
}

// A Redis that accepts connections and never answers costs one Timeout, not the client's
// read timeout; then Redis is known down and Counts fail at once.
func TestTimeoutBoundsASilentRedis(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	held := make(chan net.Conn, 16)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c // never read, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	rdb := redis.NewClient(prodOptions(&redis.Options{Addr: l.Addr().String()}))
	t.Cleanup(func() { rdb.Close() })
	r := newRig(t, rdb)
	r.b.Timeout = 100 * time.Millisecond

	start := time.Now()
	_, _, err = r.b.Count("r", "k", 10, pt0).Wait()
	took := time.Since(start)
	if err == nil || errors.Is(err, queue.ErrRedisDown) {
		t.Fatalf("first count against a silent Redis: %v, want the pipeline's error", err)
	}
	if took > 400*time.Millisecond { // the client alone would wait 500 ms
		t.Fatalf("first count took %v with Timeout %v", took, r.b.Timeout)
	}
	if !r.b.Down() {
		t.Fatal("Down() false after a timed-out pipeline")
	}
	if _, _, err := r.b.Count("r", "k", 10, pt0).Wait(); !errors.Is(err, queue.ErrRedisDown) {
		t.Fatalf("count while down: %v, want ErrRedisDown", err)
	}
}

// Redis stops: the first Count fails within the Timeout and Redis is known down; later
// Counts fail at once with ErrRedisDown, marks and undos are dropped without blocking.
// Redis comes back empty (no AOF: no data, no scripts cached): once the down window has
// passed, Counts and marks work again (scripts reloaded on NOSCRIPT).
func TestRedisDownFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{TCP: true})
	rdb := redis.NewClient(prodOptions(srv.Options()))
	t.Cleanup(func() { rdb.Close() })
	r := newRig(t, rdb)
	r.b.Timeout = 300 * time.Millisecond
	ctx := context.Background()

	for i := int64(1); i <= 2; i++ {
		if d, _ := r.count(t, "r", "k", 10, pt0); d != i {
			t.Fatalf("before the outage: depth %d, want %d", d, i)
		}
	}
	if r.b.Down() {
		t.Fatal("Down() with Redis up")
	}
	srv.Stop()

	start := time.Now()
	_, _, err := r.b.Count("r", "k", 10, pt0).Wait()
	if took := time.Since(start); took > r.b.Timeout+200*time.Millisecond {
		t.Fatalf("first count with Redis stopped took %v (Timeout %v)", took, r.b.Timeout)
	}
	if err == nil || errors.Is(err, queue.ErrRedisDown) {
		t.Fatalf("first count with Redis stopped: %v, want the pipeline's error", err)
	}
	if !r.b.Down() {
		t.Fatal("Down() false after Redis was found unreachable")
	}
	for i := 0; i < 100; i++ {
		r.b.Mark("r", "k", pt0)
		r.b.Undo("r", "k")
		if _, _, err := r.b.Count("r", "k", 10, pt0).Wait(); !errors.Is(err, queue.ErrRedisDown) {
			t.Fatalf("count %d while down: %v, want ErrRedisDown", i, err)
		}
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 3*time.Second, "up again after the outage", func() bool { return !r.b.Down() })
	d, next, err := r.b.Count("r", "k", 10, pt0).Wait()
	if err != nil {
		t.Fatalf("first count once Redis is back: %v", err)
	}
	if d != 1 || !next.Equal(pt0) { // restarted without persistence: nothing counted, nothing due
		t.Fatalf("first count once Redis is back: depth %d next %v, want 1 at %v", d, next, pt0)
	}
	r.b.Mark("r", "k", pt0)
	if d, _ := r.count(t, "r", "k", 10, pt0); d != 2 {
		t.Fatalf("second count once Redis is back: depth %d, want 2", d)
	}
	if s, ok, err := r.sched.Meter.NextSlot(ctx, "r", "k"); err != nil || !ok || !s.Equal(pt0) {
		t.Fatalf("mark once Redis is back: NextSlot %v %v %v", s, ok, err)
	}
	if r.b.Down() {
		t.Fatal("Down() after successful pipelines")
	}
}

// A batch that finds the scripts gone (NOSCRIPT) is sent again after loading them: its
// scripts run once more, its plain commands (undos) do not run twice.
func TestScriptsReloadedWithoutRepeatingUndos(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{}) // private: SCRIPT FLUSH and CLIENT PAUSE touch no other test
	rdb := srv.Client(t)
	r := newRig(t, rdb)
	ctx := context.Background()
	const keys = 40
	for k := 0; k < keys; k++ {
		key := "k" + strconv.Itoa(k)
		for i := int64(1); i <= 2; i++ {
			if d, _ := r.count(t, "r", key, 100, pt0); d != i {
				t.Fatalf("%s: depth %d, want %d", key, d, i)
			}
		}
	}
	noscript := func() int {
		info, err := rdb.Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "errorstat_NOSCRIPT:count="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	before := noscript()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Hold the batch goroutine on a plain write while every admission below is queued, so
	// they go to Redis together, in the batch that meets NOSCRIPT.
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", "100", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	r.b.Undo("r", "stall")
	pending := make([]queue.Pending, keys)
	for k := 0; k < keys; k++ {
		key := "k" + strconv.Itoa(k)
		r.b.Undo("r", key)
		r.b.Mark("r", key, pt0)
		pending[k] = r.b.Count("r", key, 100, pt0)
	}
	for k, p := range pending {
		d, next, err := p.Wait()
		if err != nil || d != 2 || !next.Equal(pt0) {
			t.Fatalf("k%d: depth %d next %v, %v; want 2 (2 in, 1 out, 1 in) at %v", k, d, next, err, pt0)
		}
	}
	if after := noscript(); after <= before {
		t.Fatalf("NOSCRIPT errors %d → %d: the reload path was not taken", before, after)
	}
	for k := 0; k < keys; k++ {
		key := "k" + strconv.Itoa(k)
		if s, ok, err := r.sched.Meter.NextSlot(ctx, "r", key); err != nil || !ok || !s.Equal(pt0) {
			t.Fatalf("%s not due after the reloaded batch: %v %v %v", key, s, ok, err)
		}
	}
	if r.b.Down() {
		t.Fatal("Down() after NOSCRIPT: a command error is not an outage")
	}
}

// Counts queued behind a batch that found Redis unreachable answer at once, not each
// after a Timeout of its own.
func TestCountsQueuedBehindATimeoutFailFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	rdb := redis.NewClient(prodOptions(&redis.Options{Addr: l.Addr().String()}))
	defer rdb.Close()
	r := newRig(t, rdb)
	r.b.Timeout = 200 * time.Millisecond
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	down := 0
	for i := 0; i < 2048; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, _, err := r.b.Count("r", "k", 10, pt0).Wait()
			mu.Lock()
			worst = max(worst, time.Since(start))
			if errors.Is(err, queue.ErrRedisDown) {
				down++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if worst > 3*r.b.Timeout {
		t.Errorf("a Count waited %v, want within ~Timeout (%v)", worst, r.b.Timeout)
	}
	if down == 0 {
		t.Errorf("no Count was answered ErrRedisDown")
	}
}

// A command error of one rule's script does not fail the counts of another rule sent in
// the same batch.
func TestOneRulesErrorDoesNotFailOtherRules(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	r := newRig(t, rdb)
	ctx := context.Background()
	r.count(t, "good", "k", 10, pt0)
	rdb.Set(ctx, r.sched.Depths.DepthKey("broken", "k"), "x", 0) // not a hash
	rdb.Do(ctx, "CLIENT", "PAUSE", "100", "WRITE")               // both Counts in one batch
	r.b.Undo("r", "stall")
	pb := r.b.Count("broken", "k", 10, pt0)
	pg := r.b.Count("good", "k", 10, pt0)
	if _, _, err := pb.Wait(); err == nil {
		t.Errorf("broken rule: no error")
	}
	if d, _, err := pg.Wait(); err != nil || d != 2 {
		t.Errorf("good rule: depth %d, err %v; want 2, nil", d, err)
	}
}

// An undo asked for while Redis is down is sent once Redis answers again: the count of a
// message that was never stored must not stay behind.
func TestUndoWhileRedisIsDownIsSentLater(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{TCP: true, AppendOnly: true})
	rdb := redis.NewClient(prodOptions(srv.Options()))
	t.Cleanup(func() { rdb.Close() })
	r := newRig(t, rdb)
	r.b.Timeout = 300 * time.Millisecond
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, _, err := r.b.Count("r", "k", 10, pt0).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	// The counts must be on disk before the kill: a rewrite writes and fsyncs a new AOF
	// holding them, and INFO says when it is done (no waiting on the once-a-second fsync).
	if err := rdb.Do(ctx, "BGREWRITEAOF").Err(); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 10*time.Second, "the AOF rewritten", func() bool {
		info, err := rdb.Info(ctx, "persistence").Result()
		return err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0") && strings.Contains(info, "aof_last_bgrewrite_status:ok")
	})
	srv.Stop()
	if _, _, err := r.b.Count("r", "k", 10, pt0).Wait(); err == nil || !r.b.Down() {
		t.Fatalf("count with Redis stopped: %v, Down %v", err, r.b.Down())
	}
	r.b.Undo("r", "k") // its publish failed
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if d, err := r.rdb.HGet(ctx, r.sched.Depths.DepthKey("r", "k"), "k").Int64(); err != nil || d != 2 {
		t.Fatalf("the counts did not survive the restart (AOF): %d %v", d, err)
	}
	waittest.Within(5*time.Second, func() bool { return !r.b.Down() })    // the Count below fails if it is not
	if _, _, err := r.b.Count("r", "other", 10, pt0).Wait(); err != nil { // sends what waited
		t.Fatalf("count after Redis came back: %v", err)
	}
	if d, err := r.rdb.HGet(ctx, r.sched.Depths.DepthKey("r", "k"), "k").Int64(); err != nil || d != 1 {
		t.Errorf("depth after Redis came back: %d %v, want 1 (the undo that waited was sent)", d, err)
	}
}

// On a fresh Redis (no scripts loaded), a count sent with a claim that finds its key free
// is still counted: the claim's nil answer does not hide the NOSCRIPT that makes the batch
// load its scripts and send the count again.
func TestCountWithClaimOnAFreshRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	r := newRig(t, srv.Client(t))
	res, owner, countErr, claimErr := countClaim(r.b, "orders", "m-9", 3, pt0, "idem-1", "id-1")
	if countErr != nil || claimErr != nil || owner != "id-1" || res.Depth != 1 {
		t.Fatalf("first count and claim on a fresh Redis: %+v owner %q, %v %v", res, owner, countErr, claimErr)
	}
	if d, _ := r.count(t, "orders", "m-9", 3, pt0); d != 2 {
		t.Fatalf("second count: depth %d, want 2", d)
	}
}

// allKeys is KEYS pattern on every master of a cluster (KEYS names no key, so the cluster
// client sends it to any one node), or on the one server.
func allKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Keys(ctx, pattern).Result()
	}
	var mu sync.Mutex
	var keys []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		ks, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	return keys, err
}

// countClaim is a count with the claim of idempotency key k for id, in one pipeline, as a
// batch submission's CountBatch sends it: the count, the key's owner, the count's error and
// the claim's own.
func countClaim(b *queue.AdmitPipeline, rule, key string, capacity int64, now time.Time, k, id string) (queue.Admitted, string, error, error) {
	out := make([]queue.CountResult, 1)
	b.CountBatch([]queue.CountRequest{{Rule: rule, Key: key, Capacity: capacity, Now: now, IdempotencyKey: k, Value: id}}, out)
	return out[0].Admitted, out[0].Owner, out[0].Err, out[0].TakeErr
}
