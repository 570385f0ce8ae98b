package retry

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// ruleShareStore is a store on e's server with cfg's bounds, checked on every call.
func ruleShareStore(t *testing.T, e *env, edit func(*Config)) *Store {
	t.Helper()
	cfg := e.store.Config()
	cfg.StateInterval = time.Nanosecond // every Park/Schedule reads the server's counts
	edit(&cfg)
	s, err := NewStore(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// scheduled is a message of rule for key whose id names them (Schedule needs one).
func scheduled(t *testing.T, rule, key string, payload []byte) queue.Message {
	t.Helper()
	id, err := queue.NewID(rule, key)
	if err != nil {
		t.Fatal(err)
	}
	m := newMessage(rule, key)
	m.ID = id
	if payload != nil {
		m.Payload = payload
	}
	return m
}

// One rule filling its share of the retry stream — by count, scheduling one message for each
// of many keys as a tenant with many keys can — is refused with ErrRuleFull (also ErrFull),
// and another rule's schedules and parks still succeed. Before the per-rule bound the flood
// filled the whole stream (FullAt) and every rule's schedules failed with ErrFull.
func TestRuleShareByCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := ruleShareStore(t, e, func(c *Config) { c.MaxMsgs, c.FullAt, c.RuleShare = 100, 0.95, 0.25 })
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	n := 0
	for ; n < 200; n++ {
		_, err := s.Schedule(ctx, "marketing", scheduled(t, "marketing", "user-"+string(rune('a'+n%26))+string(rune('a'+n/26)), nil), at)
		if err != nil {
			if !errors.Is(err, ErrRuleFull) || !errors.Is(err, ErrFull) {
				t.Fatalf("schedule %d: %v, want ErrRuleFull (and ErrFull)", n, err)
			}
			break
		}
	}
	// 0.25 × 0.95 × 100 = 23.75: the 24th is the last one in.
	if n != 24 {
		t.Fatalf("marketing scheduled %d messages before ErrRuleFull, want 24", n)
	}
	if _, err := s.Park(ctx, "marketing", newMessage("marketing", "k"), at); !errors.Is(err, ErrRuleFull) {
		t.Fatalf("marketing's park at its share: %v, want ErrRuleFull", err)
	}
	for i := range 5 {
		if _, err := s.Schedule(ctx, "orders", scheduled(t, "orders", "merchant-1", nil), at); err != nil {
			t.Fatalf("orders' schedule %d while marketing holds its share: %v", i, err)
		}
		if _, err := s.Park(ctx, "orders", newMessage("orders", "merchant-2"), at); err != nil {
			t.Fatalf("orders' park %d while marketing holds its share: %v", i, err)
		}
	}
	if got, err := s.RuleMessages(ctx, "orders"); err != nil || got != 10 {
		t.Fatalf("RuleMessages(orders) = %d, %v; want 10", got, err)
	}
	// Delivery retries are not refused: the message was accepted already.
	if err := s.ScheduleRetry(ctx, "marketing", newMessage("marketing", "k"), at); err != nil {
		t.Fatalf("a delivery retry of a rule at its share: %v", err)
	}
}

// By bytes: a rule scheduling messages of 8 KiB into a 1 MiB stream is refused once its
// messages × the stream's mean size reach its share of the bytes, far below MaxMsgs, and a
// rule of small messages still schedules. Before, the big messages filled the stream.
func TestRuleShareByBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := ruleShareStore(t, e, func(c *Config) { c.MaxBytes, c.FullAt, c.RuleShare = 1<<20, 0.95, 0.25 })
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	big := bytes.Repeat([]byte("x"), 8<<10)
	n := 0
	for ; n < 200; n++ {
		if _, err := s.Schedule(ctx, "marketing", scheduled(t, "marketing", "u"+string(rune('a'+n%26))+string(rune('a'+n/26)), big), at); err != nil {
			if !errors.Is(err, ErrRuleFull) {
				t.Fatalf("schedule %d: %v, want ErrRuleFull", n, err)
			}
			break
		}
	}
	if n < 20 || n > 35 { // 0.25 × 0.95 × 1 MiB ÷ ~8.3 KiB ≈ 30
		t.Fatalf("marketing scheduled %d messages of 8 KiB before ErrRuleFull, want about 30", n)
	}
	for i := range 10 {
		if _, err := s.Schedule(ctx, "orders", scheduled(t, "orders", "merchant-1", nil), at); err != nil {
			t.Fatalf("orders' schedule %d while marketing holds its byte share: %v", i, err)
		}
	}
}

func TestRuleShareValidate(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{-0.1, 1.5} {
		if err := (Config{RuleShare: share}).WithDefaults().Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RuleShare %g: %v, want ErrInvalidConfig", share, err)
		}
	}
	if got := (Config{}).WithDefaults().RuleShare; got != DefaultRuleShare {
		t.Errorf("default RuleShare %g", got)
	}
}
