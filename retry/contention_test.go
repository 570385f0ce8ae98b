package retry

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// Parked messages of one key that fire in the same second, in any order, are back in their
// queue within seconds once it has room: a message re-parked only to stay behind an older
// one of its key does not back off as if the queue were full. (Schedules firing in the same
// second come in no set order; with the youngest first every round, its backoff doubled
// each time — the end-to-end suite saw a key's last parked messages re-admitted 34 and 68
// seconds after a burst whose queue had room again after one.)
func TestParkedMessagesFiringOutOfOrderAreNotHeldBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("strict", time.Hour))
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := start
	// The key's queue: capacity 3, one message leaves every 200 ms (outflow 5/s).
	var leaves []time.Time
	depth := func() int {
		n := 0
		for _, l := range leaves {
			if l.After(clock) {
				n++
			}
		}
		return n
	}
	admitted := map[string]time.Time{}
	admit := func(ctx context.Context, r Rule, m queue.Message, msgID string) (AdmitResult, error) {
		if d := depth(); d >= 3 {
			return AdmitResult{Outcome: Full, RetryAt: clock.Add(time.Duration(d) * 200 * time.Millisecond)}, nil
		}
		last := clock
		if len(leaves) > 0 && leaves[len(leaves)-1].After(last) {
			last = leaves[len(leaves)-1]
		}
		leaves = append(leaves, last.Add(200*time.Millisecond))
		admitted[m.ID] = clock
		return AdmitResult{Outcome: Admitted}, nil
	}
	r, err := NewReadmitter(ReadmitterConfig{Store: e.store, Dead: e.dead, Admit: admit, Rules: e.rules.get,
		MinBackoff: time.Second, MaxBackoff: 5 * time.Minute, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	// A burst of 10 into the queue of 3: 3 admitted, 7 parked until the same second.
	for i := 0; i < 3; i++ {
		admit(context.Background(), rule, newMessage(rule.Name, "k"), "")
	}
	type firing struct {
		at    time.Time
		m     queue.Message
		parks int
	}
	var pending []firing
	for i := 0; i < 7; i++ {
		pending = append(pending, firing{start.Add(time.Second), newMessage(rule.Name, "k"), 0})
	}
	held := keyHolds{}
	hk := rule.Name + "\x00k"
	for rounds := 0; len(pending) > 0; rounds++ {
		if rounds > 100 {
			t.Fatalf("%d messages still parked after 100 firings", len(pending))
		}
		// The earliest second; within it the youngest first (ids sort by time).
		sort.Slice(pending, func(a, b int) bool {
			if !pending[a].at.Equal(pending[b].at) {
				return pending[a].at.Before(pending[b].at)
			}
			return pending[a].m.ID > pending[b].m.ID
		})
		f := pending[0]
		pending = pending[1:]
		clock = f.at
		res, err := r.decide(context.Background(), f.m, scheduleMeta{Kind: KindPark, RetryAt: f.at.Truncate(time.Second), Parks: f.parks}, held)
		if err != nil {
			t.Fatal(err)
		}
		if res != ResultAdmitted {
			pending = append(pending, firing{held[hk].parked[f.m.ID].Truncate(time.Second), f.m, f.parks + 1})
		}
	}
	var last time.Duration
	for _, at := range admitted {
		last = max(last, at.Sub(start))
	}
	t.Logf("the last of 7 parked messages re-admitted %v after the burst", last)
	// 7 messages at 5/s through 3 places: room for all within ~2 s; a second per round of
	// firings on top.
	if last > 6*time.Second {
		t.Errorf("the last parked message was re-admitted %v after the burst, want within 6 s", last)
	}
}
