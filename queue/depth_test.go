package queue_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// The depth counters of many keys are spread over small hashes that Redis keeps as compact
// listpacks (partition.go, "Depth buckets"): they cost a few tens of bytes per key, where
// one big hash of them cost ~64 B per field, and every bucket is in its partition's slot.
func TestDepthCountersAreCompact(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, sc := range queue.Scripts() {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const keys = 200_000
	key := func(i int) string { return "user-" + strconv.Itoa(i) }
	now := time.Now()
	adms := make([]queue.Admission, 0, 1000)
	for i := 0; i < keys; i++ {
		adms = append(adms, queue.Admission{Key: key(i), Capacity: 10, Now: now})
		if len(adms) == cap(adms) {
			pipe := rdb.Pipeline()
			c := s.CountAdmittedPipe(ctx, pipe, "r", adms)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := queue.AdmittedResults(c, len(adms), nil); err != nil || got[0].Depth != 1 {
				t.Fatalf("count: %v %v", got[:1], err)
			}
			adms = adms[:0]
		}
	}
	buckets := map[string]bool{}
	for i := 0; i < keys; i++ {
		buckets[s.Depths.DepthKey("r", key(i))] = true
	}
	for i := 0; i < keys; i += keys / 100 {
		if d, err := rdb.HGet(ctx, s.Depths.DepthKey("r", key(i)), key(i)).Int(); err != nil || d != 1 {
			t.Fatalf("depth of %s: %d %v, want 1", key(i), d, err)
		}
	}
	slot := queue.KeySlotForTest(s.KeyOf("r", key(0), "due"))
	pipe := rdb.Pipeline()
	var sizes []func() (int64, string)
	for b := range buckets {
		if got := queue.KeySlotForTest(b); got != slot {
			t.Fatalf("bucket %s in slot %d, the partition's is %d", b, got, slot)
		}
		m, enc := pipe.MemoryUsage(ctx, b, 0), pipe.ObjectEncoding(ctx, b)
		sizes = append(sizes, func() (int64, string) { return m.Val(), enc.Val() })
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, size := range sizes {
		m, enc := size()
		if enc != "listpack" {
			t.Fatalf("a bucket is a %s, want listpack", enc)
		}
		total += m
	}
	perKey := float64(total) / keys
	t.Logf("%d keys' depth counters in %d buckets: %d B, %.1f B per key", keys, len(buckets), total, perKey)
	if perKey > 32 {
		t.Errorf("%.1f B per key's depth counter, want ≤ 32", perKey)
	}
}

// DeleteRule and ResetDepths leave no depth bucket behind.
func TestDeletingARuleDeletesItsDepthBuckets(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	prefix := redistest.Prefix(t)
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func() {
		t.Helper()
		for i := 0; i < 50; i++ {
			if err := s.Depths.SetDepth(ctx, "r", "k"+strconv.Itoa(i), 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	buckets := func() []string {
		t.Helper()
		ks, err := rdb.Keys(ctx, prefix+"sl:{r}:depth*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	count()
	if n := len(buckets()); n < 40 {
		t.Fatalf("%d depth buckets for 50 keys, want about one each", n)
	}
	if err := s.Depths.ResetDepths(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if ks := buckets(); len(ks) != 0 {
		t.Fatalf("after ResetDepths: %d depth keys left, e.g. %s", len(ks), ks[0])
	}
	count()
	if err := s.DeleteRule(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if ks := buckets(); len(ks) != 0 {
		t.Fatalf("after DeleteRule: %d depth keys left, e.g. %s", len(ks), ks[0])
	}
}
