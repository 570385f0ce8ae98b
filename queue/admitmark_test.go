package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// TestAdmitMarkIsCountThenMark: counting stored admissions (Admission.Stored, admit.lua's
// stored counts) answers and leaves Redis exactly as counts alone followed by marks alone of the stored
// keys does, over every state a key can be in: already due, idle with a future or a past
// slot, held by a drainer, at capacity, a bad counter, new, repeated in the batch, and an
// admission that was not stored (counted, not marked).
func TestAdmitMarkIsCountThenMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := scriptRedis(t)
	now := t0.Add(10 * time.Second)
	setup := func() *queue.Scheduler { return admissionFixture(t, rdb, now, 1) }
	adms := []queue.Admission{
		{Key: "due", Capacity: 10, Stored: true}, {Key: "idle", Capacity: 10, Stored: true},
		{Key: "past", Capacity: 10, Stored: true}, {Key: "held", Capacity: 10, Stored: true},
		{Key: "full", Capacity: 2, Stored: true}, {Key: "bad", Capacity: 10, Stored: true},
		{Key: "new", Capacity: 10, Stored: true}, {Key: "new", Capacity: 10, Stored: true},
		{Key: "idle", Capacity: 10, Stored: true}, {Key: "lost", Capacity: 10}, {Key: "full", Capacity: 2},
	}
	for i := range adms {
		adms[i].Now = now.Add(time.Duration(i) * time.Microsecond)
	}
	run := func(s *queue.Scheduler, adms []queue.Admission) []queue.Admitted {
		pipe := rdb.Pipeline()
		c := s.CountAdmittedPipe(ctx, pipe, "r", adms)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := queue.AdmittedResults(c, len(adms), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Before: counted, then the stored ones marked.
	before := setup()
	plain := make([]queue.Admission, len(adms))
	var marks []string
	for i, a := range adms {
		plain[i] = a
		plain[i].Stored = false
		if a.Stored {
			marks = append(marks, a.Key)
		}
	}
	want := run(before, plain)
	pipe := rdb.Pipeline()
	before.MarkDuePipe(ctx, pipe, "r", marks, adms[len(adms)-3].Now) // the latest stored admission's now
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Now: one call.
	after := setup()
	got := run(after, adms)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers:\n got  %v\n want %v", got, want)
	}
	state := func(s *queue.Scheduler) string { return admissionState(rdb, s, adms) }
	if g, w := state(after), state(before); g != w {
		t.Errorf("state:\n got\n%s want\n%s", g, w)
	}
}

// admissionFixture is a scheduler with fresh keys of rule "r" in every state a key can be
// in when admissions are counted and marked: "due" (due in 5 s, depth 3), "idle" (its next
// slot in 2 s), "past" (an idle slot in the past), "held" by a drainer (its next slot in
// 3 s), "full" (depth 2), "bad" (a counter below zero); any other key is new.
func admissionFixture(t *testing.T, rdb redis.UniversalClient, now time.Time, partitions int) *queue.Scheduler {
	t.Helper()
	ctx := context.Background()
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t) + strconv.Itoa(int(time.Now().UnixNano())) + ":",
		Partitions: func(string) int { return partitions }})
	if err != nil {
		t.Fatal(err)
	}
	k := func(key, kind string) string { return s.KeyOf("r", key, kind) }
	us := func(d time.Duration) float64 { return float64(now.Add(d).UnixMicro()) }
	rdb.ZAdd(ctx, k("due", "due"), redis.Z{Score: us(5 * time.Second), Member: "due"})
	rdb.HSet(ctx, k("due", "depth"), "due", 3)
	rdb.ZAdd(ctx, k("idle", "idle"), redis.Z{Score: us(2 * time.Second), Member: "idle"})
	rdb.ZAdd(ctx, k("past", "idle"), redis.Z{Score: us(-time.Second), Member: "past"})
	rdb.HSet(ctx, k("held", "held"), "held", "A#7 "+strconv.FormatInt(now.Add(3*time.Second).UnixMicro(), 10))
	rdb.ZAdd(ctx, k("held", "lease"), redis.Z{Score: us(time.Minute), Member: "held"})
	rdb.HSet(ctx, k("held", "depth"), "held", 1)
	rdb.HSet(ctx, k("full", "depth"), "full", 2)
	rdb.HSet(ctx, k("bad", "depth"), "bad", -3)
	return s
}

// admissionState is everything Redis holds of rule "r"'s keys among adms: each key's depth
// counter, and the due, idle, dirty, held and lease sets of the keys' partitions.
func admissionState(rdb redis.UniversalClient, s *queue.Scheduler, adms []queue.Admission) string {
	ctx := context.Background()
	out := ""
	for _, a := range adms { // each key's depth counter is in its own bucket
		d, _ := rdb.HGet(ctx, s.KeyOf("r", a.Key, "depth"), a.Key).Result()
		out += fmt.Sprint("depth ", a.Key, "=", d, "\n")
	}
	seen := map[string]bool{}
	for _, a := range adms {
		for _, kind := range []string{"due", "idle", "dirty", "held", "lease"} {
			key := s.KeyOf("r", a.Key, kind)
			if seen[key] {
				continue
			}
			seen[key] = true
			if typ, _ := rdb.Type(ctx, key).Result(); typ == "zset" {
				z, _ := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
				out += fmt.Sprint(kind, z, "\n")
			} else {
				h, _ := rdb.HGetAll(ctx, key).Result()
				out += fmt.Sprint(kind, h, "\n")
			}
		}
	}
	return out
}

// TestMarkCountIsMarkThenCount: a batch's marks and counts in one call per partition
// (MarkCountPipe, one admit.lua call) answer and leave Redis exactly as admit.lua's marks
// alone followed by its counts alone do, over every state a key can be in (admissionFixture), with keys marked
// and counted in the same batch, marked twice, marked only and counted only; on one
// partition and on 64, where some partitions get only marks and others only counts; and
// with stored counts of a batch submission among the counts (marks alone, then counts with
// stored ones).
func TestMarkCountIsMarkThenCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := scriptRedis(t)
	now := t0.Add(10 * time.Second)
	markNow := now.Add(-time.Millisecond)
	for _, tc := range []struct {
		parts  int
		stored bool
	}{{1, false}, {64, false}, {1, true}, {64, true}} {
		marks := []string{"due", "idle", "past", "held", "new", "new", "marked-only", "m-1", "m-2", "m-3"}
		counts := []string{"due", "idle", "past", "held", "full", "bad", "new", "new", "counted-only", "c-1", "c-2", "c-3"}
		if tc.parts > 1 {
			// A key alone in its partition among the marks, and one among the counts.
			marks = append(marks, keyAlone(tc.parts, "marked-alone", marks, counts))
			counts = append(counts, keyAlone(tc.parts, "counted-alone", marks, counts))
		}
		var adms []queue.Admission
		for i, key := range counts {
			c := int64(10)
			if key == "full" {
				c = 2
			}
			adms = append(adms, queue.Admission{Key: key, Capacity: c, Now: now.Add(time.Duration(i) * time.Microsecond)})
		}
		if tc.stored { // a batch submission's message, counted and marked in one call
			adms = append(adms, queue.Admission{Key: "stored", Capacity: 10, Now: now, Stored: true})
		}
		all := slices.Clone(adms)
		for _, m := range marks {
			all = append(all, queue.Admission{Key: m})
		}
		parts := tc.parts
		// Before: the marks' script, then the counts'.
		before := admissionFixture(t, rdb, now, parts)
		pipe := rdb.Pipeline()
		before.MarkDuePipe(ctx, pipe, "r", marks, markNow)
		c := before.CountAdmittedPipe(ctx, pipe, "r", adms)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		want, err := queue.AdmittedResults(c, len(adms), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Now: one call per partition.
		after := admissionFixture(t, rdb, now, parts)
		pipe = rdb.Pipeline()
		c = after.MarkCountPipe(ctx, pipe, "r", marks, markNow, adms)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := queue.AdmittedResults(c, len(adms), nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%+v, answers:\n got  %v\n want %v", tc, got, want)
		}
		if g, w := admissionState(rdb, after, all), admissionState(rdb, before, all); g != w {
			t.Errorf("%+v, state:\n got\n%s want\n%s", tc, g, w)
		}
		// And what both do, key by key (both are admit.lua, so the comparison
		// alone would not test it).
		at := func(key string) time.Time {
			return adms[slices.IndexFunc(adms, func(a queue.Admission) bool { return a.Key == key })].Now
		}
		for _, w := range []struct {
			key   string
			depth int64
			next  time.Time
			held  bool
		}{
			{"due", 4, now.Add(5 * time.Second), false},    // keeps its score
			{"idle", 1, now.Add(2 * time.Second), false},   // marked at its idle slot, later than now
			{"past", 1, at("past"), false},                 // its slot passed: due at the mark, which is before the count's now
			{"held", 2, now.Add(3 * time.Second), true},    // the slot after the head its drainer delivers
			{"full", 2, at("full"), false},                 // clamped to capacity
			{"bad", 1, at("bad"), false},                   // clamped to 1
			{"counted-only", 1, at("counted-only"), false}, // new and not marked: now
		} {
			i := slices.IndexFunc(adms, func(a queue.Admission) bool { return a.Key == w.key })
			if g := got[i]; g.Depth != w.depth || !g.Next.Equal(w.next) || g.Held != w.held {
				t.Errorf("%+v, %s: %+v, want depth %d, next %v, held %v", tc, w.key, g, w.depth, w.next, w.held)
			}
		}
		dues := map[string]float64{"idle": float64(now.Add(2 * time.Second).UnixMicro()), "new": float64(markNow.UnixMicro()), "marked-only": float64(markNow.UnixMicro())}
		if parts > 1 {
			dues[marks[len(marks)-1]] = float64(markNow.UnixMicro()) // a partition with marks only
		}
		if tc.stored {
			dues["stored"] = float64(now.UnixMicro()) // made due by its own count
		}
		for key, want := range dues {
			if score, err := rdb.ZScore(ctx, after.KeyOf("r", key, "due"), key).Result(); err != nil || score != want {
				t.Errorf("%+v: %s due at %v (%v), want %v", tc, key, score, err, want)
			}
		}
		if n, _ := rdb.ZCard(ctx, after.KeyOf("r", "idle", "idle")).Result(); n != 0 && parts == 1 {
			t.Errorf("%+v: %d idle slots left; the marks take or sweep them all", tc, n)
		}
		if d, _ := rdb.HGet(ctx, after.KeyOf("r", "held", "dirty"), "held").Result(); d == "" {
			t.Errorf("%+v: the held key was not flagged dirty", tc)
		}
		if _, err := rdb.ZScore(ctx, after.KeyOf("r", "held", "due"), "held").Result(); err == nil {
			t.Errorf("%+v: the held key was made due", tc)
		}
	}
}

// scriptRedis is testRedis with the scripts that pipelines send (EVALSHA) loaded.
func scriptRedis(t *testing.T) redis.UniversalClient {
	rdb := testRedis(t)
	for _, s := range queue.Scripts() {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return rdb
}

// keyAlone is a key named prefix-N that falls in a partition (of parts) none of the others
// fall in.
func keyAlone(parts int, prefix string, others ...[]string) string {
	taken := map[int]bool{}
	for _, ks := range others {
		for _, k := range ks {
			taken[queue.PartitionOf(k, parts)] = true
		}
	}
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s-%d", prefix, i); !taken[queue.PartitionOf(k, parts)] {
			return k
		}
	}
}
