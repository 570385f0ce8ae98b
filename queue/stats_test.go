package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

func TestHotKeys(t *testing.T) {
	t.Parallel()
	s := newSchedulers(t, 1)[0]
	ctx := context.Background()
	// 2,500 keys of depth 1..5 and three deep ones, one with a key that is syntax elsewhere,
	// every one due (HotKeys reads the keys with messages: due or claimed).
	var keys []string
	for i := 0; i < 2500; i++ {
		k := fmt.Sprintf("k-%d", i)
		if err := s.Depths.SetDepth(ctx, "r", k, int64(1+i%5)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for k, d := range map[string]int64{"deep.*>": 90, "deeper 🚀": 120, "deepest": 300} {
		s.Depths.SetDepth(ctx, "r", k, d)
		keys = append(keys, k)
	}
	if _, err := s.Claims.MarkDueAt(ctx, "r", time.Now(), keys...); err != nil {
		t.Fatal(err)
	}
	// One of them claimed: it is still listed.
	if _, err := s.Claims.Claim(ctx, "r", time.Now().Add(time.Hour), queue.ClaimRequest{Owner: "A", Max: 1, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.Depths.SetDepth(ctx, "other", "elsewhere", 1000) // another rule's key never shows
	s.Claims.MarkDueAt(ctx, "other", time.Now(), "elsewhere")
	s.Depths.SetDepth(ctx, "r", "counted, not yet due", 2000) // a count whose mark is on its way is not listed
	got, complete, err := s.Depths.HotKeys(ctx, "r", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []queue.KeyDepth{{"deepest", 300}, {"deeper 🚀", 120}, {"deep.*>", 90}, {"k-1004", 5}}
	if !complete || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("HotKeys = %v (complete %v), want %v", got, complete, want)
	}
	if got, complete, _ := s.Depths.HotKeys(ctx, "empty", 4); len(got) != 0 || !complete {
		t.Fatalf("empty rule: %v %v", got, complete)
	}
}

func TestRefusedRate(t *testing.T) {
	t.Parallel()
	a := newSchedulers(t, 1)[0]
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 5, 0, time.UTC)
	// Two ingresses count refusals over the last minute; the current bucket is not read yet.
	for i := 0; i < 6; i++ {
		at := now.Add(-time.Duration(i+1) * 10 * time.Second)
		if err := a.Rates.AddRefused(ctx, map[string]int64{"r": 20, "q": 1}, at); err != nil {
			t.Fatal(err)
		}
		if err := a.Rates.AddRefused(ctx, map[string]int64{"r": 10}, at); err != nil {
			t.Fatal(err)
		}
	}
	a.Rates.AddRefused(ctx, map[string]int64{"r": 1000}, now)                     // this bucket: not complete yet
	a.Rates.AddRefused(ctx, map[string]int64{"r": 1000}, now.Add(-2*time.Minute)) // older than a minute
	rate, err := a.Rates.RefusedRate(ctx, "r", now)
	if err != nil {
		t.Fatal(err)
	}
	if rate != 3 { // 6 × 30 refusals over 60 s
		t.Fatalf("RefusedRate = %v, want 3/s", rate)
	}
	if rate, _ := a.Rates.RefusedRate(ctx, "none", now); rate != 0 {
		t.Fatalf("a rule without refusals: %v", rate)
	}
	// Deliveries are counted apart from refusals, the same way (two drainers here).
	for i := 0; i < 6; i++ {
		at := now.Add(-time.Duration(i+1) * 10 * time.Second)
		a.Rates.AddDelivered(ctx, map[string]int64{"r": 50}, at)
		a.Rates.AddDelivered(ctx, map[string]int64{"r": 10}, at)
	}
	if rate, err := a.Rates.DeliveredRate(ctx, "r", now); err != nil || rate != 6 {
		t.Fatalf("DeliveredRate = %v, %v; want 6/s", rate, err)
	}
	if rate, _ := a.Rates.RefusedRate(ctx, "r", now); rate != 3 {
		t.Fatalf("deliveries leaked into refusals: %v", rate)
	}
}
