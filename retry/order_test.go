package retry

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
