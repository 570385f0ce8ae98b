package bucket_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/redistest"
)

// pipeHook records the names of the commands a client sends, pipelined or not.
type pipeHook struct {
	mu    sync.Mutex
	names []string
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}
func (h *pipeHook) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if n := c.Name(); n != "hello" && n != "client" {
			h.names = append(h.names, n)
		}
	}
}

// TestRedisCountOverIsACounterPerWindow: a key whose only limit is a fixed window that
// counts over (envoy's counting) is decided without the script — INCRBY and PEXPIRE, or
// a GET to peek — in a counter per window that expires with its window (plus the slack),
// and answers as the script would.
func TestRedisCountOverIsACounterPerWindow(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1} { // the default batching, and none: the same layout
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			countOverIsACounterPerWindow(t, batch)
		})
	}
}

func countOverIsACounterPerWindow(t *testing.T, batch int) {
	c := redistest.Shared(t).Client(t)
	hook := &pipeHook{}
	c.AddHook(hook)
	prefix := redistest.Prefix(t)
	const slack = 10 * time.Millisecond
	s, err := bucket.NewRedis(c, bucket.RedisConfig{Prefix: prefix, TTLSlack: slack, Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limits := []bucket.Limit{{Rate: 20, Interval: time.Minute, CountOver: true}}
	now := t0.Add(20 * time.Second) // 40 s left in the window
	r, err := s.Allow(ctx, "k", limits, 0, now)
	if err != nil || !r.Allowed || r.Decisions[0].Remaining != 20 {
		t.Fatalf("peek of a fresh key: %+v, %v", r.Decisions[0], err)
	}
	if r, err = s.Allow(ctx, "k", limits, 16, now); err != nil || !r.Allowed || r.Decisions[0].Remaining != 4 {
		t.Fatalf("16 hits of 20: %+v, %v", r.Decisions[0], err)
	}
	// 5 more are over and counted all the same: the next single hit is over too.
	if r, err = s.Allow(ctx, "k", limits, 5, now); err != nil || r.Allowed || r.Decisions[0].Remaining != 0 || r.RetryAfter() != 40*time.Second {
		t.Fatalf("5 over: %+v (retry after %v), %v", r.Decisions[0], r.RetryAfter(), err)
	}
	if r, err = s.Allow(ctx, "k", limits, 1, now.Add(time.Second)); err != nil || r.Allowed || r.Decisions[0].ResetAfter != 39*time.Second {
		t.Fatalf("1 more: %+v, %v", r.Decisions[0], err)
	}
	// The next window starts afresh.
	if r, err = s.Allow(ctx, "k", limits, 1, t0.Add(time.Minute)); err != nil || !r.Allowed || r.Decisions[0].Remaining != 19 {
		t.Fatalf("next window: %+v, %v", r.Decisions[0], err)
	}
	want := []string{"get", "incrby", "pexpire", "incrby", "pexpire", "incrby", "pexpire", "incrby", "pexpire"}
	if !slices.Equal(hook.names, want) {
		t.Fatalf("commands sent: %v, want %v", hook.names, want)
	}
	w := t0.Unix() / 60
	for i, win := range []int64{w, w + 1} {
		key := prefix + "{k}:fw60000:c" + strconv.FormatInt(win, 10)
		n, err := c.Get(ctx, key).Int64()
		if wantN := []int64{22, 1}[i]; err != nil || n != wantN {
			t.Errorf("%s = %d (%v), want %d", key, n, err, wantN)
		}
		// The store's clock is t0's, Redis's is now: the TTL is at most the window's
		// remainder plus the slack, and set.
		if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute+slack {
			t.Errorf("%s: pttl %v", key, ttl)
		}
	}
}
