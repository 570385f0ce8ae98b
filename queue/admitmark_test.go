package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// TestAdmitMarkIsCountThenMark: counting stored admissions (Admission.Stored, admitmark.lua)
// answers and leaves Redis exactly as admitcount.lua followed by markdue.lua of the stored
// keys does, over every state a key can be in: already due, idle with a future or a past
// slot, held by a drainer, at capacity, a bad counter, new, repeated in the batch, and an
// admission that was not stored (counted, not marked).
func TestAdmitMarkIsCountThenMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testRedis(t)
	now := t0.Add(10 * time.Second)
	for _, s := range queue.Scripts() { // pipelines send EVALSHA
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setup := func() *queue.Scheduler {
		s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t) + strconv.Itoa(int(time.Now().UnixNano())) + ":"})
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
	state := func(s *queue.Scheduler) string {
		out := ""
		for _, a := range adms { // each key's depth counter is in its own bucket
			d, _ := rdb.HGet(ctx, s.KeyOf("r", a.Key, "depth"), a.Key).Result()
			out += fmt.Sprint("depth ", a.Key, "=", d, "\n")
		}
		for _, kind := range []string{"due", "idle", "dirty", "held", "lease"} {
			key := s.KeyOf("r", "x", kind)
			if typ, _ := rdb.Type(ctx, key).Result(); typ == "zset" {
				z, _ := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
				out += fmt.Sprint(kind, z, "\n")
			} else {
				h, _ := rdb.HGetAll(ctx, key).Result()
				out += fmt.Sprint(kind, h, "\n")
			}
		}
		return out
	}
	if g, w := state(after), state(before); g != w {
		t.Errorf("state:\n got\n%s want\n%s", g, w)
	}
}
