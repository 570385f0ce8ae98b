package retry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

func TestReadmitterAdmitsWhenThereIsRoom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	q := newFakeQueue(nil)
	reg := prometheus.NewRegistry()
	startReadmitter(t, e, q.Admit, func(c *ReadmitterConfig) { c.Registerer = reg })
	ctx := context.Background()

	m := newMessage(rule.Name, "m/42 🚀")
	fire, err := e.store.Park(ctx, rule.Name, m, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 15*time.Second, ResultAdmitted, 1)
	calls, adm := q.snapshot()
	got, ok := adm[m.ID]
	if !ok {
		t.Fatalf("admitted under %v, want msgID = message id for a never-queued message", adm)
	}
	if got.ID != m.ID || got.Key != m.Key || !bytes.Equal(got.Payload, m.Payload) || got.Attempt != 0 || got.ParkedFrom.IsZero() {
		t.Errorf("admitted %+v, want the parked message", got)
	}
	if calls[0].at.Before(fire) {
		t.Errorf("admitted at %s, before its retry_at %s", calls[0].at, fire)
	}
	waittest.Eventually(t, 10*time.Second, "the retry stream is empty", func() bool { return streamMsgs(t, e) == 0 })
	if v := counterValue(t, reg, "r", ResultAdmitted); v != 1 {
		t.Errorf("sluice_readmissions_total{result=admitted} = %v, want 1", v)
	}
}

// counterValue reads sluice_readmissions_total{rule,result} from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, rule, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_readmissions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["rule"] == rule && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestReadmitterReparksWhileFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	// Full twice (the second time with a suggested retry_at 2s away), then room.
	q := newFakeQueue(func(call int, m queue.Message) (AdmitResult, error) {
		switch call {
		case 1:
			return AdmitResult{Outcome: Full}, nil
		case 2:
			return AdmitResult{Outcome: WindowClosed, RetryAt: time.Now().Add(2 * time.Second)}, nil
		}
		return AdmitResult{Outcome: Admitted}, nil
	})
	startReadmitter(t, e, q.Admit, nil)
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	if _, err := e.store.Park(ctx, rule.Name, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 20*time.Second, ResultAdmitted, 1) // on the third try
	if n := e.handled.count(ResultReparked); n != 2 {
		t.Errorf("%d re-parks before the admission, want 2", n)
	}
	calls, _ := q.snapshot()
	if len(calls) != 3 {
		t.Fatalf("%d Admit calls, want 3", len(calls))
	}
	for i, c := range calls {
		if c.msgID != m.ID || c.m.ID != m.ID {
			t.Errorf("call %d: msgID %q id %q, want %q for both", i, c.msgID, c.m.ID, m.ID)
		}
		if !c.m.ParkedFrom.Equal(calls[0].m.ParkedFrom) {
			t.Errorf("call %d: ParkedFrom moved from %s to %s; max_age counts from the first park", i, calls[0].m.ParkedFrom, c.m.ParkedFrom)
		}
	}
	// Backoff ≥ MinBackoff (1s) between the first two; the suggested retry_at (2s) between
	// the last two. Both rounded up to the second by the schedule.
	if d := calls[1].at.Sub(calls[0].at); d < time.Second {
		t.Errorf("re-parked for %s, want at least the 1s min backoff", d)
	}
	if d := calls[2].at.Sub(calls[1].at); d < 2*time.Second-50*time.Millisecond {
		t.Errorf("re-parked for %s, want at least the suggested 2s", d)
	}
	if !strings.Contains(calls[2].m.LastError, "window_closed") {
		t.Errorf("LastError = %q, want the re-admission outcome", calls[2].m.LastError)
	}
	waittest.Eventually(t, 10*time.Second, "the retry stream is empty", func() bool { return streamMsgs(t, e) == 0 })
}

func TestReadmitterDeadAfterMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", 3*time.Second))
	q := newFakeQueue(func(int, queue.Message) (AdmitResult, error) {
		// Always full, suggesting a time far beyond max_age: the re-park must be capped at
		// the max_age deadline so the message dies on time.
		return AdmitResult{Outcome: Full, RetryAt: time.Now().Add(time.Hour)}, nil
	})
	startReadmitter(t, e, q.Admit, nil)
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	start := time.Now()
	if _, err := e.store.Park(ctx, rule.Name, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 20*time.Second, ResultDead, 1) // after park.max_age
	dl, err := e.dead.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 3*time.Second || el > 10*time.Second {
		t.Errorf("dead after %s, want about the 3s max_age", el)
	}
	if !strings.Contains(dl.Reason, "max_age") || !strings.Contains(dl.Reason, "full") {
		t.Errorf("reason = %q, want max_age and the last re-admission outcome", dl.Reason)
	}
	if dl.Message.ID != m.ID || !bytes.Equal(dl.Message.Payload, m.Payload) || dl.Message.Key != m.Key {
		t.Errorf("dead letter holds %+v, want the parked message", dl.Message)
	}
	waittest.Eventually(t, 10*time.Second, "the retry stream is empty", func() bool { return streamMsgs(t, e) == 0 })
}

func TestReadmitterRuleRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("gone", time.Hour))
	q := newFakeQueue(nil)
	startReadmitter(t, e, q.Admit, nil)
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	if _, err := e.store.Park(ctx, rule.Name, m, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	e.rules.remove(rule.Name)
	e.handled.wait(t, 15*time.Second, ResultDead, 1) // the rule was removed
	dl, err := e.dead.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Reason != ReasonRuleRemoved || dl.Message.Rule != "gone" {
		t.Errorf("dead letter %+v, want reason %q of rule gone", dl, ReasonRuleRemoved)
	}
	if calls, _ := q.snapshot(); len(calls) != 0 {
		t.Errorf("Admit called %d times for a removed rule", len(calls))
	}
}

func TestReadmitterDeliveryRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("relaxed", time.Hour))
	q := newFakeQueue(nil)
	startReadmitter(t, e, q.Admit, nil)
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	m.Attempt, m.LastError = 2, "sink: http 503 Service Unavailable"
	if err := e.store.ScheduleRetry(ctx, rule.Name, m, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.store.Parked(ctx, rule.Name); n != 0 {
		t.Errorf("a delivery retry counted as parked (%d)", n)
	}
	e.handled.wait(t, 15*time.Second, ResultAdmitted, 1) // the delivery retry
	calls, _ := q.snapshot()
	c := calls[0]
	if c.m.ID != m.ID || c.m.Attempt != 2 || c.m.LastError != m.LastError || !c.m.ParkedFrom.IsZero() {
		t.Errorf("re-admitted %+v, want the message with its attempts and never parked", c.m)
	}
	if c.msgID == m.ID || c.msgID != AdmitMsgID(m) {
		t.Errorf("msgID = %q, want a generation id (the queue saw %q already)", c.msgID, m.ID)
	}
}

func TestReadmitterErrorIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	q := newFakeQueue(func(call int, m queue.Message) (AdmitResult, error) {
		if call == 1 {
			return AdmitResult{}, errors.New("nats: no responders")
		}
		return AdmitResult{Outcome: Admitted}, nil
	})
	startReadmitter(t, e, q.Admit, func(c *ReadmitterConfig) { c.ErrorBackoff = time.Second })
	m := newMessage(rule.Name, "k")
	if _, err := e.store.Park(context.Background(), rule.Name, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 15*time.Second, ResultAdmitted, 1)
	if n := e.handled.count(ResultError); n != 1 {
		t.Errorf("%d failed handlings before the admission, want the 1 Admit error", n)
	}
}

// Two re-admitters share the work; when one is too slow and its message is delivered
// again to the other, both re-admit it under the same msgID, so the queue keeps one copy.
func TestTwoReadmittersIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	const n, workers = 40, 4
	// The target message's key has a worker of its own: no other message waits behind its
	// hung admission, so the consumer keeps pulling and the server can deliver it again.
	targetKey := "target"
	ids := map[string]bool{}
	var msgs []queue.Message
	for i := 0; len(msgs) < n-1; i++ {
		key := fmt.Sprint("k", i)
		if keyShard(rule.Name, key, workers) == keyShard(rule.Name, targetKey, workers) {
			continue
		}
		m := newMessage(rule.Name, key)
		ids[m.ID] = true
		msgs = append(msgs, m)
	}
	tm := newMessage(rule.Name, targetKey)
	ids[tm.ID] = true
	msgs = append(msgs, tm)
	// The first admission of the target hangs until the server has delivered it again
	// after AckWait (the consumer counts the redelivery): the redelivery is forced, not left
	// to timing. The consumer is pinned to one re-admitter, so the copy waits for the hung
	// admission to end and is then re-admitted under the same msgID.
	target := tm.ID
	var targetCalls atomic.Int32
	redelivered := make(chan struct{})
	var r1 *Readmitter
	q := newFakeQueue(func(call int, m queue.Message) (AdmitResult, error) {
		if m.ID == target {
			switch targetCalls.Add(1) {
			case 1:
				waittest.Within(15*time.Second, func() bool {
					c, err := e.store.js.Consumer(ctx, e.store.cfg.Stream, r1.ConsumerConfig().Durable)
					if err != nil {
						return false
					}
					info, err := c.Info(ctx)
					return err == nil && info.NumRedelivered > 0
				})
			case 2:
				close(redelivered)
			}
		}
		return AdmitResult{Outcome: Admitted}, nil
	})
	mod := func(c *ReadmitterConfig) { c.AckWait = time.Second; c.Workers = workers }
	r1 = startReadmitter(t, e, q.Admit, mod)
	startReadmitter(t, e, q.Admit, mod)
	for _, m := range msgs {
		if _, err := e.store.Park(ctx, rule.Name, m, time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Eventually(t, 30*time.Second, "all admitted and acked", func() bool {
		_, adm := q.snapshot()
		return len(adm) == n && streamMsgs(t, e) == 0
	})
	select {
	case <-redelivered:
	case <-time.After(15 * time.Second):
		t.Fatalf("message %s was not delivered again after its first admission hung past AckWait", target)
	}
	calls, adm := q.snapshot()
	for id := range adm {
		if !ids[id] {
			t.Errorf("admitted unknown msgID %q", id)
		}
	}
	if len(adm) != n {
		t.Errorf("%d distinct admissions of %d messages", len(adm), n)
	}
	for _, c := range calls {
		if c.msgID != c.m.ID {
			t.Errorf("re-admission of %s under msgID %q: a redelivery would not deduplicate", c.m.ID, c.msgID)
		}
	}
	if l, _, err := e.dead.List(ctx, "", 10, 0); err != nil || len(l) != 0 {
		t.Errorf("dead letters: %d, %v; want none", len(l), err)
	}
}

func TestReadmitterStartStopTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := newFakeQueue(nil)
	r, err := NewReadmitter(ReadmitterConfig{Store: e.store, Dead: e.dead, Admit: q.Admit, Rules: e.rules.get})
	if err != nil {
		t.Fatal(err)
	}
	r.Stop() // before Start: no-op
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	r.Stop()

	// A stopped re-admitter leaves fired messages for the next one.
	rule := e.rules.add(parkRule("r", time.Hour))
	m := newMessage(rule.Name, "k")
	if _, err := e.store.Park(ctx, rule.Name, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 10*time.Second, "fired", func() bool { return len(firedMessages(t, e, rule.Name)) == 1 })
	if c, _ := q.snapshot(); len(c) != 0 {
		t.Fatalf("stopped re-admitter handled %d messages", len(c))
	}
	startReadmitter(t, e, q.Admit, nil)
	// The stopped re-admitter may have left the consumer's pin on one of its last pulls
	// (it got no message, so it cannot know and does not unpin): the pin then moves after
	// its TTL (10 s).
	e.handled.wait(t, 20*time.Second, ResultAdmitted, 1) // by the next re-admitter
}

func TestReadmitterConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := NewReadmitter(ReadmitterConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty config: %v, want ErrInvalidConfig", err)
	}
}

// Parked messages, fired or not, survive a restart of the server while a re-admitter runs,
// and a re-admitter replaced mid-way: every one is re-admitted, none is lost or dead.
func TestReadmitterSurvivesRestarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	q := newFakeQueue(nil)
	ctx := context.Background()
	const n = 30
	for i := range n {
		// Due over 3 seconds: some fire before the restarts, some after.
		if _, err := e.store.Park(ctx, rule.Name, newMessage(rule.Name, "k"), time.Now().Add(time.Duration(i%3)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := NewReadmitter(ReadmitterConfig{Store: e.store, Dead: e.dead, Admit: q.Admit, Rules: e.rules.get,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	first.handled = e.handled.record
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 10*time.Second, ResultAdmitted, 1) // some re-admitted
	first.Stop()                                         // the drainer process restarts…
	if err := e.node.Restart(); err != nil {             // …and so does NATS
		t.Fatal(err)
	}
	// As a restarted drainer would, start once this client is back and JetStream answers
	// (creating the consumer at once timed out now and then on a loaded machine).
	waittest.Eventually(t, 30*time.Second, "JetStream answers after the restart", func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := e.js.AccountInfo(c)
		return err == nil
	})
	startReadmitter(t, e, q.Admit, nil)
	waittest.Eventually(t, 30*time.Second, "all re-admitted", func() bool { _, adm := q.snapshot(); return len(adm) == n }) // distinct messages: a redelivery after the restart is handled twice
	waittest.Eventually(t, 10*time.Second, "the retry stream is empty", func() bool {
		st, err := e.js.Stream(ctx, e.store.cfg.Stream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	if l, _, err := e.dead.List(ctx, "", 10, 0); err != nil || len(l) != 0 {
		t.Errorf("dead letters: %d, %v; want none", len(l), err)
	}
}

// A v0.3 drainer that starts during a rolling upgrade rewrites the re-admitters' consumer
// without its priority group; the server then refuses the pinned pulls and nats.go ends the
// consumption. The re-admitter puts its consumer back and re-admits what fires afterwards.
func TestReadmitterRecoversItsConsumer(t *testing.T) {
	t.Parallel()
	e, rule, q, r := startRecovery(t)
	ctx := context.Background()
	old := r.ConsumerConfig() // as v0.3 wrote it: no priority group
	old.PriorityPolicy, old.PriorityGroups, old.PinnedTTL = jetstream.PriorityPolicyNone, nil, 0
	if _, err := e.store.js.CreateOrUpdateConsumer(ctx, e.store.cfg.Stream, old); err != nil {
		t.Fatal(err)
	}
	readmitted(t, e, q, rule, "k2", "the second message re-admitted after the consumer was rewritten")
	waittest.Eventually(t, 30*time.Second, "the consumer pinned again", func() bool {
		c, err := e.store.js.Consumer(ctx, e.store.cfg.Stream, r.ConsumerConfig().Durable)
		return err == nil && c.CachedInfo().Config.PriorityPolicy == jetstream.PriorityPolicyPinned
	})
	readmitted(t, e, q, rule, "k3", "a message fired after the recovery re-admitted")
}

// A re-admitter whose consumer is deleted under it (an operator, a stream recreated) sees
// nats.go end its consumption; it creates the consumer again and re-admits what fires
// afterwards, instead of looking healthy while consuming nothing.
func TestReadmitterRecoversItsDeletedConsumer(t *testing.T) {
	t.Parallel()
	e, rule, q, r := startRecovery(t)
	ctx := context.Background()
	if err := e.store.js.DeleteConsumer(ctx, e.store.cfg.Stream, r.ConsumerConfig().Durable); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 30*time.Second, "the consumer created again", func() bool {
		_, err := e.store.js.Consumer(ctx, e.store.cfg.Stream, r.ConsumerConfig().Durable)
		return err == nil
	})
	readmitted(t, e, q, rule, "k2", "a message fired after the recovery re-admitted")
}

// startRecovery starts a re-admitter and waits until it re-admitted a first message.
func startRecovery(t *testing.T) (*env, string, *fakeQueue, *Readmitter) {
	t.Helper()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	q := newFakeQueue(nil)
	r := startReadmitter(t, e, q.Admit, nil)
	readmitted(t, e, q, rule.Name, "k1", "the first message re-admitted")
	return e, rule.Name, q, r
}

// readmitted parks a new message of key under rule, due now, and waits until q admitted it.
func readmitted(t *testing.T, e *env, q *fakeQueue, rule, key, what string) queue.Message {
	t.Helper()
	m := newMessage(rule, key)
	before := e.handled.count(ResultAdmitted)
	if _, err := e.store.Park(context.Background(), rule, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Each admission wakes the wait; a redelivered earlier message may come first.
	for n := before + 1; ; n++ {
		e.handled.wait(t, 30*time.Second, ResultAdmitted, n)
		if _, adm := q.snapshot(); adm[m.ID].ID == m.ID {
			return m
		}
		t.Logf("%s: waiting on (admissions so far: %d)", what, n)
	}
}

// A re-admitter that stops while it holds the consumer's pin gives it up: the next one takes
// fired messages at once, not after the pin's TTL (10 s).
func TestStoppingReadmitterGivesThePinUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	q1 := newFakeQueue(nil)
	r1, err := NewReadmitter(ReadmitterConfig{Store: e.store, Dead: e.dead, Admit: q1.Admit, Rules: e.rules.get})
	if err != nil {
		t.Fatal(err)
	}
	r1.handled = e.handled.record
	if err := r1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	readmitted(t, e, q1, rule.Name, "k1", "the first message re-admitted by the first re-admitter")
	r1.Stop()

	q2 := newFakeQueue(nil)
	startReadmitter(t, e, q2.Admit, nil)
	second := newMessage(rule.Name, "k2")
	fire, err := e.store.Park(ctx, rule.Name, second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.handled.wait(t, 15*time.Second, ResultAdmitted, 2) // the second message, by the next re-admitter
	if late := time.Since(fire); late > 5*time.Second {
		t.Errorf("the next re-admitter took the message %v after it fired: the pin was not given up", late)
	}
}
