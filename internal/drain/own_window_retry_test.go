package drain_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/internal/window"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// TestSteerWindowScheduledAndParkedOwnEngine: a rule's delivery.window (Asia/Seoul) opens
// 4 s from now. A scheduled message (deliver_at in 1 s) and parked messages (re-admitted
// in 1-2 s) become due while it is closed: the real retry stream and re-admitter put them
// back into their keys' queues, where the window is judged at the key's head, so they wait
// for it — none is delivered before it opens — and then go in order (the scheduled one
// behind the message already queued for its key, the parked ones in the order they were
// parked) at the rule's outflow.
func TestSteerWindowScheduledAndParkedOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Skip("no tz database:", err)
	}
	opens := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	local := opens.In(seoul)
	from := time.Duration(local.Hour())*time.Hour + time.Duration(local.Minute())*time.Minute +
		time.Duration(local.Second())*time.Second + time.Duration(local.Nanosecond())
	r := e.rule("winretry", 10, 0, func(r *rules.Rule) {
		r.Delivery.Window = window.Window{From: from, To: min(from+time.Hour, 24*time.Hour), Zone: seoul, Set: true}
	})
	ctx := context.Background()
	store, err := retry.NewStore(e.js, retry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := retry.NewDeadLetters(e.js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dead.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The re-admission the ingress wires (retryrules.Admit): the message goes back into its
	// key's queue.
	admit := func(ctx context.Context, _ retry.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		if _, err := e.q.EnqueueAs(ctx, r.Name, m, msgID); err != nil {
			return retry.AdmitResult{}, err
		}
		return retry.AdmitResult{Outcome: retry.Admitted}, nil
	}
	ra, err := retry.NewReadmitter(retry.ReadmitterConfig{Store: store, Dead: dead, Admit: admit,
		Rules: retry.Rules(retry.Rule{Name: r.Name}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ra.Stop)

	msg := func(key string, i int) queue.Message {
		id, err := queue.NewID(r.Name, key)
		if err != nil {
			t.Fatal(err)
		}
		return queue.Message{ID: id, Rule: r.Name, Key: key, Payload: []byte(strconv.Itoa(i)), CreatedAt: time.Now()}
	}
	// Key "sched": one message queued now, one scheduled for 1 s from now.
	queued, sched := msg("sched", 0), msg("sched", 1)
	if _, err := e.q.Enqueue(ctx, r.Name, queued); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Schedule(ctx, r.Name, sched, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Key "parked": three messages parked in order (re-admitted within 1-2 s).
	var parked []string
	for i := range 3 {
		m := msg("parked", i)
		if _, err := store.Park(ctx, r.Name, m, time.Now().Add(500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		parked = append(parked, m.ID)
	}
	sink := &orderSink{}
	e.drainer(ctx, sink, ownEngine)
	waittest.Eventually(t, 4*time.Second, "the scheduled and parked messages back in their queues while the window is closed", func() bool {
		st, err := e.q.Stats(ctx, r.Name)
		return err == nil && st.Msgs == 5
	})
	if time.Now().After(opens) {
		t.Fatal("the messages came back after the window opened: the test shows nothing")
	}
	backAt := time.Now()
	waittest.Eventually(t, 30*time.Second, "every message delivered once the window opens", func() bool {
		return len(sink.ids("sched")) == 2 && len(sink.ids("parked")) == 3
	})
	t.Logf("back in their queues %v before the window opened; first deliveries %v (sched) and %v (parked) after it",
		opens.Sub(backAt).Round(time.Millisecond), sink.first("sched").Sub(opens).Round(time.Millisecond), sink.first("parked").Sub(opens).Round(time.Millisecond))
	for _, k := range []string{"sched", "parked"} {
		if f := sink.first(k); f.Before(opens) {
			t.Errorf("%s: delivered %v before the window opened", k, opens.Sub(f))
		}
	}
	if got, want := sink.ids("sched"), []string{queued.ID, sched.ID}; !slices.Equal(got, want) {
		t.Errorf("sched: delivered %v, want %v (the queued message, then the scheduled one)", got, want)
	}
	if got := sink.ids("parked"); !slices.Equal(got, parked) {
		t.Errorf("parked: delivered %v, want %v (in the order parked)", got, parked)
	}
	// At the outflow: the parked key's 3 deliveries span at least 2 intervals of 100 ms.
	if span := sink.last("parked").Sub(sink.first("parked")); span < 190*time.Millisecond {
		t.Errorf("parked: 3 deliveries within %v, want ≥ 200ms less timer slack (10/s)", span)
	}
}

// TestSteerWindowAcrossMidnightOwnEngine: a Seoul window that crosses midnight there (from
// 2 s from now, Seoul time, to one minute before that time on the next day: From > To, the
// form of "22:00 to 06:00"). The key's messages wait until it opens, then go in order at the
// rule's outflow; the engine judges the wrapped window as the window package does
// (TestSeoulNightWindowCrossesMidnight checks the instants around midnight).
func TestSteerWindowAcrossMidnightOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seoul, err := time.LoadLocation("Asia/Seoul")
	if err != nil {
		t.Skip("no tz database:", err)
	}
	opens := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	local := opens.In(seoul)
	from := time.Duration(local.Hour())*time.Hour + time.Duration(local.Minute())*time.Minute +
		time.Duration(local.Second())*time.Second + time.Duration(local.Nanosecond())
	if from < 2*time.Minute {
		t.Skip("run within two minutes after midnight in Seoul: the window would not cross it")
	}
	w := window.Window{From: from, To: from - time.Minute, Zone: seoul, Set: true}
	if w.Open(time.Now(), seoul) || !w.Open(opens.Add(time.Hour), seoul) {
		t.Fatalf("window %v–%v: open now or closed an hour after it opens", w.From, w.To)
	}
	r := e.rule("midnight", 20, 0, func(r *rules.Rule) { r.Delivery.Window = w })
	ctx := context.Background()
	var ids []string
	for i := range 10 {
		id, err := queue.NewID(r.Name, "k")
		if err != nil {
			t.Fatal(err)
		}
		m := queue.Message{ID: id, Rule: r.Name, Key: "k", Payload: []byte(strconv.Itoa(i)), CreatedAt: time.Now()}
		if _, err := e.q.Enqueue(ctx, r.Name, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	sink := &orderSink{}
	e.drainer(ctx, sink, ownEngine)
	waittest.Eventually(t, 30*time.Second, "every message delivered once the window opens", func() bool { return len(sink.ids("k")) == 10 })
	first, last := sink.first("k"), sink.last("k")
	t.Logf("window %s–%s Seoul (crosses midnight); first delivery %v after it opened, 10 in %v",
		local.Format("15:04:05"), local.Add(-time.Minute).Format("15:04:05"), first.Sub(opens).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond))
	if first.Before(opens) {
		t.Errorf("delivered %v before the window opened", opens.Sub(first))
	}
	if got := sink.ids("k"); !slices.Equal(got, ids) {
		t.Errorf("delivered %v, want %v in order", got, ids)
	}
	if span := last.Sub(first); span < 9*45*time.Millisecond {
		t.Errorf("10 deliveries within %v, want ≥ 450ms less timer slack (20/s)", span)
	}
}
