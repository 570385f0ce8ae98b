package retry

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// Under strict ordering a younger parked message of a key never overtakes an older one,
// even when it comes back first: each message's backoff doubles with its own park count, so
// a message parked once fires again before one parked twice. Here the older message is
// re-parked (no room), then the younger fires while the older is still parked, and finds
// room: it must park behind the older one instead of taking the place. (It was admitted,
// and the key's messages reached the sink out of order under load.)
func TestYoungerParkedMessageNeverOvertakesAnOlderOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("strict", time.Hour))
	var calls atomic.Int32
	room := atomic.Bool{}
	admit := func(ctx context.Context, r Rule, m queue.Message, msgID string) (AdmitResult, error) {
		calls.Add(1)
		if room.Load() {
			return AdmitResult{Outcome: Admitted}, nil
		}
		return AdmitResult{Outcome: Full}, nil
	}
	r, err := NewReadmitter(ReadmitterConfig{Store: e.store, Dead: e.dead, Admit: admit, Rules: e.rules.get,
		MinBackoff: time.Second, MaxBackoff: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	older, younger := newMessage(rule.Name, "k"), newMessage(rule.Name, "k")
	now := time.Now()
	held := keyHolds{}
	hk := rule.Name + "\x00k"

	// The older message fires for the second time: no room, re-parked 2 s later.
	if res, err := r.decide(ctx, older, scheduleMeta{Kind: KindPark, RetryAt: now.Truncate(time.Second), Parks: 1}, held); err != nil || res != ResultReparked {
		t.Fatalf("older: %s, %v", res, err)
	}
	olderAt := held[hk].parked[older.ID]
	// Room frees up; the younger fires (its first re-park came back sooner) while the older
	// is still parked: it must not be admitted ahead of it.
	room.Store(true)
	if res, err := r.decide(ctx, younger, scheduleMeta{Kind: KindPark, RetryAt: now.Truncate(time.Second).Add(time.Second), Parks: 0}, held); err != nil || res != ResultReparked {
		t.Fatalf("younger while the older is parked: %s, %v (want re-parked behind it)", res, err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d admissions tried, want 1: the younger must not try for the place", n)
	}
	if at := held[hk].parked[younger.ID]; at.Before(olderAt) {
		t.Errorf("younger re-parked until %v, before the older's %v", at, olderAt)
	}
	// The older fires and is admitted; then the younger is.
	if res, err := r.decide(ctx, older, scheduleMeta{Kind: KindPark, RetryAt: olderAt.Truncate(time.Second), Parks: 2}, held); err != nil || res != ResultAdmitted {
		t.Fatalf("older, with room: %s, %v", res, err)
	}
	if res, err := r.decide(ctx, younger, scheduleMeta{Kind: KindPark, RetryAt: olderAt.Truncate(time.Second).Add(time.Second), Parks: 1}, held); err != nil || res != ResultAdmitted {
		t.Fatalf("younger, after the older: %s, %v", res, err)
	}
}

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

// A key's parked messages that fire in the same second reach the re-admitter in no set order;
// under strict ordering it still admits them oldest first, the first time they fire too
// (before it has re-parked any of them, it knows of no older one to wait for). Here the
// fired copies arrive youngest first, and there is room for all.
func TestFiredMessagesAreAdmittedOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("strict", time.Hour))
	var mu sync.Mutex
	var order []string
	admit := func(ctx context.Context, r Rule, m queue.Message, msgID string) (AdmitResult, error) {
		mu.Lock()
		order = append(order, m.ID)
		mu.Unlock()
		return AdmitResult{Outcome: Admitted}, nil
	}
	ctx := context.Background()
	var ms []queue.Message
	for range 7 {
		ms = append(ms, newMessage(rule.Name, "k"))
	}
	fired := time.Now().Truncate(time.Second)
	for i := len(ms) - 1; i >= 0; i-- { // as the server fired them: youngest first
		msg := encode(e.store.ReadySubject(rule.Name), ms[i])
		msg.Header.Set(HeaderKind, KindPark)
		msg.Header.Set(HeaderRetryAt, fired.Format(time.RFC3339))
		if _, err := e.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	startReadmitter(t, e, admit, nil)
	waittest.Eventually(t, 15*time.Second, "all 7 admitted", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 7 })
	mu.Lock()
	defer mu.Unlock()
	for i, id := range order {
		if id != ms[i].ID {
			t.Fatalf("admitted in the order %v; want the submission order %v", short(order), short(ids(ms)))
		}
	}
}

func ids(ms []queue.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func short(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id[len(id)-4:]
	}
	return out
}
