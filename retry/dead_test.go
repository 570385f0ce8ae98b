package retry

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/queue"
)

func TestDeadLetterGetAndIdempotence(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("orders.per-merchant", time.Hour))
	ctx := context.Background()
	m := newMessage(rule.Name, "m/42 café 🚀")
	m.Attempt, m.LastError = 8, "sink: http 500 Internal Server Error: boom\nline two"
	dl := e.dead
	for range 2 { // a drainer that crashed after Dead and before deleting: same message again
		if err := dl.Dead(ctx, rule.Name, m, "max_attempts (8) reached"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.dead.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != "max_attempts (8) reached" || got.DeadAt.IsZero() || got.Seq == 0 {
		t.Errorf("dead letter = %+v", got)
	}
	g := got.Message
	if g.ID != m.ID || g.Key != m.Key || g.Rule != rule.Name || g.Attempt != 8 || g.LastError != m.LastError ||
		!bytes.Equal(g.Payload, m.Payload) || !g.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("dead message = %+v\nwant %+v", g, m)
	}
	if n, err := e.dead.Count(ctx, rule.Name); err != nil || n != 1 {
		t.Errorf("Count = %d, %v; want 1 (one dead letter per id)", n, err)
	}
	if _, err := e.dead.Get(ctx, "no-such-id"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get unknown: %v, want ErrNotFound", err)
	}
}

func TestDeadLetterListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.rules.add(parkRule("a", time.Hour))
	b := e.rules.add(parkRule("b", time.Hour))
	ctx := context.Background()
	var wantA []string
	for i := range 7 {
		ma := newMessage(a.Name, "k")
		wantA = append(wantA, ma.ID)
		if err := e.dead.Dead(ctx, a.Name, ma, "refused"); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := e.dead.Dead(ctx, b.Name, newMessage(b.Name, "k"), "refused"); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	var cursor uint64
	pages := 0
	for {
		page, next, err := e.dead.List(ctx, a.Name, 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, dl := range page {
			if dl.Message.Rule != a.Name {
				t.Errorf("List(a) returned a dead letter of rule %q", dl.Message.Rule)
			}
			got = append(got, dl.Message.ID)
		}
		if next == 0 {
			break
		}
		if pages > 10 {
			t.Fatal("List does not terminate")
		}
		cursor = next
	}
	if len(got) != len(wantA) {
		t.Fatalf("listed %d dead letters of a, want %d", len(got), len(wantA))
	}
	for i := range got {
		if got[i] != wantA[i] {
			t.Errorf("item %d = %s, want %s (oldest first)", i, got[i], wantA[i])
		}
	}
	all, _, err := e.dead.List(ctx, "", 100, 0)
	if err != nil || len(all) != 11 {
		t.Errorf("List(all) = %d, %v; want 11", len(all), err)
	}
	for rule, want := range map[string]uint64{"a": 7, "b": 4, "c": 0} {
		if n, err := e.dead.Count(ctx, rule); err != nil || n != want {
			t.Errorf("Count(%s) = %d, %v; want %d", rule, n, err, want)
		}
	}
}

func TestDeadLetterReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	m.Attempt, m.LastError, m.ParkedFrom = 3, "sink: http 400 Bad Request", time.Now()
	if err := e.dead.Dead(ctx, rule.Name, m, "sink: http 400 Bad Request"); err != nil {
		t.Fatal(err)
	}

	// No room: the dead letter stays, the caller learns when to try again.
	retryAt := time.Now().Add(time.Minute)
	full := newFakeQueue(func(int, queue.Message) (AdmitResult, error) {
		return AdmitResult{Outcome: Full, RetryAt: retryAt}, nil
	})
	res, err := e.dead.Replay(ctx, m.ID, full.Admit)
	if err != nil || res.Outcome != Full || !res.RetryAt.Equal(retryAt) {
		t.Fatalf("replay into a full queue: %+v, %v", res, err)
	}
	if _, err := e.dead.Get(ctx, m.ID); err != nil {
		t.Fatalf("dead letter gone after a replay that found no room: %v", err)
	}

	q := newFakeQueue(nil)
	res, err = e.dead.Replay(ctx, m.ID, q.Admit)
	if err != nil || res.Outcome != Admitted {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	calls, _ := q.snapshot()
	c := calls[0]
	if c.m.ID != m.ID || c.m.Attempt != 0 || c.m.LastError != "" || !c.m.ParkedFrom.IsZero() || !bytes.Equal(c.m.Payload, m.Payload) {
		t.Errorf("replayed %+v, want the message with attempts reset", c.m)
	}
	if c.msgID == m.ID {
		t.Error("replayed under the message id: the queue would drop it as a duplicate within its window")
	}
	if _, err := e.dead.Get(ctx, m.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("dead letter still there after replay: %v", err)
	}
	// Twice: nothing more happens.
	if _, err := e.dead.Replay(ctx, m.ID, q.Admit); !errors.Is(err, ErrNotFound) {
		t.Errorf("second replay: %v, want ErrNotFound", err)
	}
	if calls, _ := q.snapshot(); len(calls) != 1 {
		t.Errorf("Admit called %d times for two replays, want 1", len(calls))
	}

	// A rule that disappeared cannot be replayed into.
	m2 := newMessage("vanished", "k")
	if err := e.dead.Dead(ctx, "", m2, ReasonRuleRemoved); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dead.Replay(ctx, m2.ID, q.Admit); !errors.Is(err, ErrRuleNotFound) {
		t.Errorf("replay of a removed rule: %v, want ErrRuleNotFound", err)
	}
}

// Two concurrent replays of one dead letter use the same msgID, so the queue keeps one copy.
func TestDeadLetterConcurrentReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	if err := e.dead.Dead(ctx, rule.Name, m, "refused"); err != nil {
		t.Fatal(err)
	}
	// Both replays read the dead letter before either deletes it: each Admit waits until
	// the other has arrived too (a replay reads the dead letter before it admits).
	var arrivals sync.WaitGroup
	arrivals.Add(2)
	bothIn := make(chan struct{})
	go func() { arrivals.Wait(); close(bothIn) }()
	q := newFakeQueue(func(int, queue.Message) (AdmitResult, error) {
		arrivals.Done()
		select {
		case <-bothIn:
			return AdmitResult{Outcome: Admitted}, nil
		case <-time.After(15 * time.Second):
			return AdmitResult{}, errors.New("the other replay never reached Admit")
		}
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := e.dead.Replay(ctx, m.ID, q.Admit); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("replay: %v", err)
		}
	}
	if _, adm := q.snapshot(); len(adm) != 1 {
		t.Errorf("queue holds %d copies, want 1", len(adm))
	}
}

func TestCollector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	for range 3 {
		if _, err := e.store.Park(ctx, rule.Name, newMessage(rule.Name, "k"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.dead.Dead(ctx, rule.Name, newMessage(rule.Name, "k"), "x"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(CollectorConfig{Store: e.store, Dead: e.dead, RuleNames: func() []string { return []string{"r", "other"} }}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"sluice_parked/r": 3, "sluice_dead/r": 1, "sluice_parked/other": 0, "sluice_dead/other": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// A dead letter of an expired message replayed goes back without its past expiry (it
// would otherwise be dead again as "expired" at its key's head); an expiry still ahead
// is kept.
func TestDeadLetterReplayExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()

	past := newMessage(rule.Name, "k")
	past.ExpiresAt = time.Now().Add(-time.Minute).UTC()
	future := newMessage(rule.Name, "k")
	future.ExpiresAt = time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for _, m := range []queue.Message{past, future} {
		if err := e.dead.Dead(ctx, rule.Name, m, ReasonExpired); err != nil {
			t.Fatal(err)
		}
	}
	q := newFakeQueue(nil)
	for _, m := range []queue.Message{past, future} {
		if res, err := e.dead.Replay(ctx, m.ID, q.Admit); err != nil || res.Outcome != Admitted {
			t.Fatalf("replay %s: %+v, %v", m.ID, res, err)
		}
	}
	calls, _ := q.snapshot()
	if len(calls) != 2 {
		t.Fatalf("%d admissions, want 2", len(calls))
	}
	if got := calls[0].m; !got.ExpiresAt.IsZero() || got.Expired(time.Now()) {
		t.Errorf("replayed expired message with ExpiresAt %v: it would die again as expired; want none", got.ExpiresAt)
	}
	if got := calls[1].m; !got.ExpiresAt.Equal(future.ExpiresAt) {
		t.Errorf("replayed message with ExpiresAt %v, want its future expiry %v kept", got.ExpiresAt, future.ExpiresAt)
	}
}
