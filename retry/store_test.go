package retry

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

func TestFireTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 5, 0, 0, 400_000_000, time.UTC)
	tests := []struct {
		at, want time.Time
	}{
		{now.Add(2 * time.Second), time.Date(2026, 11, 22, 5, 0, 3, 0, time.UTC)},                      // 02.4 → 03
		{time.Date(2026, 11, 22, 5, 0, 7, 0, time.UTC), time.Date(2026, 11, 22, 5, 0, 7, 0, time.UTC)}, // whole second kept
		{time.Date(2026, 11, 22, 5, 0, 7, 1, time.UTC), time.Date(2026, 11, 22, 5, 0, 8, 0, time.UTC)}, // 1 ns late → next second
		{now.Add(-time.Hour), time.Date(2026, 11, 22, 5, 0, 1, 0, time.UTC)},                           // past → now's second, rounded up
	}
	for _, tc := range tests {
		if got := FireTime(tc.at, now); !got.Equal(tc.want) {
			t.Errorf("FireTime(%s) = %s, want %s", tc.at.Format(time.RFC3339Nano), got, tc.want)
		}
	}
}

func TestAdmitMsgID(t *testing.T) {
	t.Parallel()
	m := queue.Message{ID: "0192f5e4-7c1a-7d2e-9a41-1b2c3d4e5f60"}
	if got := AdmitMsgID(m); got != m.ID {
		t.Errorf("never queued: %q, want the message id", got)
	}
	m.Attempt = 3
	if got := AdmitMsgID(m); got == m.ID || got != AdmitMsgID(m) {
		t.Errorf("after 3 attempts: %q, want a stable id different from the message id", got)
	}
}

// firedMessages reads the messages on the ready subject of rule, in order. An error
// (e.g. while the client reconnects after a server restart) reads as "none yet".
func firedMessages(t *testing.T, e *env, rule string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, e.store.cfg.Stream)
	if err != nil {
		t.Logf("stream: %v", err)
		return nil
	}
	var out []*jetstream.RawStreamMsg
	seq := uint64(1)
	for {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(e.store.ReadySubject(rule)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Logf("get: %v", err)
			return nil
		}
		out = append(out, raw)
		seq = raw.Sequence + 1
	}
}

func TestParkFiresAtItsSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("orders.per-merchant", time.Hour)) // a name with a dot: tokenised
	ctx := context.Background()

	type parked struct {
		m    queue.Message
		fire time.Time
	}
	var all []parked
	for i, delay := range []time.Duration{1200 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond} {
		m := newMessage(rule.Name, []string{"m/42 café 🚀", "a.b*c>", ""}[i])
		now := time.Now()
		fire, err := e.store.Park(ctx, rule.Name, m, now.Add(delay))
		if err != nil {
			t.Fatal(err)
		}
		if fire.Before(now.Add(delay)) || fire.Sub(now.Add(delay)) >= time.Second || fire.Nanosecond() != 0 {
			t.Fatalf("retry_at %s for at %s: want the next whole second", fire, now.Add(delay).Format(time.RFC3339Nano))
		}
		all = append(all, parked{m, fire})
	}
	if n, err := e.store.Parked(ctx, rule.Name); err != nil || n != 3 {
		t.Errorf("Parked = %d, %v; want 3", n, err)
	}

	var fired []*jetstream.RawStreamMsg
	waittest.Eventually(t, 15*time.Second, "3 parked messages fired", func() bool {
		fired = firedMessages(t, e, rule.Name)
		return len(fired) == 3
	})
	for _, raw := range fired {
		got, err := decode(raw.Header, raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		var want parked
		for _, p := range all {
			if p.m.ID == got.ID {
				want = p
			}
		}
		if want.m.ID == "" {
			t.Fatalf("fired unknown message %q", got.ID)
		}
		if !bytes.Equal(got.Payload, want.m.Payload) || got.Key != want.m.Key || got.Rule != rule.Name ||
			!got.CreatedAt.Equal(want.m.CreatedAt) || got.ParkedFrom.IsZero() {
			t.Errorf("fired message differs:\n got %+v\nwant %+v", got, want.m)
		}
		meta := decodeMeta(raw.Header)
		if meta.Kind != KindPark || !meta.RetryAt.Equal(want.fire) || meta.Parks != 1 {
			t.Errorf("meta = %+v, want park at %s, parks 1", meta, want.fire)
		}
		// Fires at its second: never early, and late by well under the tolerance.
		late := raw.Time.Sub(want.fire)
		if late < 0 || late > 1500*time.Millisecond {
			t.Errorf("message %s fired %s after its retry_at", got.ID, late)
		}
	}
	// The schedules were purged when they fired.
	if n, err := e.store.Parked(ctx, rule.Name); err != nil || n != 3 {
		t.Errorf("Parked after firing = %d, %v; want 3 (all on the ready subject)", n, err)
	}
	if got := streamMsgs(t, e); got != 3 {
		t.Errorf("retry stream holds %d messages, want the 3 fired ones only", got)
	}
}

func TestParkAgainReplacesSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	for range 3 { // e.g. a client retry after a timeout
		if _, err := e.store.Park(ctx, rule.Name, m, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := e.store.Parked(ctx, rule.Name); n != 1 {
		t.Errorf("Parked = %d after parking one message 3 times, want 1", n)
	}
	if got := streamMsgs(t, e); got != 1 {
		t.Errorf("retry stream holds %d messages, want 1", got)
	}
}

// A message scheduled again within the duplicate window is stored once, even after its
// first schedule left the stream (cancelled here, by deleting it).
func TestScheduleAgainIsStoredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	m, other := newMessage(rule.Name, "k"), newMessage(rule.Name, "k")
	var err error
	if m.ID, err = queue.NewID(rule.Name, "k"); err != nil { // Schedule takes ids that name their key
		t.Fatal(err)
	}
	if other.ID, err = queue.NewID(rule.Name, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Schedule(ctx, rule.Name, m, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.store.Cancel(ctx, rule.Name, m.ID); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if _, err := e.store.Schedule(ctx, rule.Name, m, time.Now().Add(time.Hour)); !errors.Is(err, ErrScheduledAlready) {
		t.Fatalf("second Schedule: %v, want ErrScheduledAlready", err)
	}
	if got := streamMsgs(t, e); got != 0 {
		t.Errorf("retry stream holds %d messages, want none", got)
	}
	// Another message of the key schedules as usual.
	if _, err := e.store.Schedule(ctx, rule.Name, other, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

func TestParkSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rule := e.rules.add(parkRule("r", time.Hour))
	ctx := context.Background()
	m := newMessage(rule.Name, "k")
	fire, err := e.store.Park(ctx, rule.Name, m, time.Now().Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.Restart(); err != nil {
		t.Fatal(err)
	}
	var fired []*jetstream.RawStreamMsg
	waittest.Eventually(t, 20*time.Second, "the parked message fired after a server restart", func() bool {
		fired = firedMessages(t, e, rule.Name)
		return len(fired) == 1
	})
	got, err := decode(fired[0].Header, fired[0].Data)
	if err != nil || got.ID != m.ID {
		t.Fatalf("fired %+v, %v; want message %s", got, err, m.ID)
	}
	if fired[0].Time.Before(fire) {
		t.Errorf("fired at %s, before its retry_at %s", fired[0].Time, fire)
	}
}

func TestParkRefusesWhenStreamNearlyFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.store.Config()
	cfg.MaxMsgs, cfg.FullAt, cfg.StateInterval = 10, 0.5, time.Nanosecond
	cfg.RuleShare = 1 // the whole stream's bound, not a rule's (TestRuleShare)
	s, err := NewStore(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	rule := parkRule("r", time.Hour)
	for i := range 5 {
		if _, err := s.Park(ctx, rule.Name, newMessage("r", "k"), time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("park %d: %v", i, err)
		}
	}
	if _, err := s.Park(ctx, rule.Name, newMessage("r", "k"), time.Now().Add(time.Hour)); !errors.Is(err, ErrFull) {
		t.Fatalf("6th park: %v, want ErrFull", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []Config{
		{Stream: "has.dot"},
		{SubjectPrefix: "a..b"},
		{SubjectPrefix: "a.*"},
		{Replicas: 2},
		{FullAt: 1.5},
	}
	for _, c := range bad {
		if err := c.WithDefaults().Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", c, err)
		}
	}
	if err := (Config{SubjectPrefix: "sluice.retry"}).WithDefaults().Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
