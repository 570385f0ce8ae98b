package retry

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// TestReadmissionLatenessReport parks 10k messages due over 5 seconds and measures how
// late each is re-admitted after its retry_at: the server's schedule firing (stream
// timestamp of the fired copy) and the end-to-end lateness at Admit, whose stand-in does
// what the real wiring does — one JetStream publish with the msgID into a queue stream.
// Run with SLUICE_BENCH=1 (make bench).
func TestReadmissionLatenessReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to run")
	}
	const (
		n       = 10_000
		seconds = 5
	)
	e := newEnv(t)
	rule := e.rules.add(parkRule("bench", 24*time.Hour))
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_Q", Subjects: []string{"benchq.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}

	// Admit: one publish into the queue stream, like queue.Queues.EnqueueAs.
	var mu sync.Mutex
	admitted := make(map[string]time.Time, n)
	admit := func(ctx context.Context, r Rule, m queue.Message, msgID string) (AdmitResult, error) {
		msg := queue.EncodeMessage("benchq."+token(r.Name)+"."+queue.KeyToken(m.Key), m)
		msg.Header.Set(queue.HeaderMsgID, msgID)
		if _, err := e.js.PublishMsg(ctx, msg); err != nil {
			return AdmitResult{}, err
		}
		mu.Lock()
		if _, dup := admitted[m.ID]; !dup {
			admitted[m.ID] = time.Now()
		}
		mu.Unlock()
		return AdmitResult{Outcome: Admitted}, nil
	}

	startReadmitter(t, e, admit, nil)

	ids, retryAt, parkTook := parkMany(t, e, rule, n, seconds)

	waittest.Eventually(t, 2*time.Minute, "all re-admitted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(admitted) == n
	})
	waittest.Eventually(t, 30*time.Second, "retry stream drained", func() bool { return streamMsgs(t, e) == 0 })

	var admitLate []time.Duration
	var first, last time.Time
	mu.Lock()
	for i, id := range ids {
		admitLate = append(admitLate, admitted[id].Sub(retryAt[i]))
		if first.IsZero() || retryAt[i].Before(first) {
			first = retryAt[i]
		}
		if admitted[id].After(last) {
			last = admitted[id]
		}
	}
	mu.Unlock()
	for _, l := range admitLate {
		if l < 0 {
			t.Errorf("a message was re-admitted %s before its retry_at", -l)
			break
		}
	}
	t.Logf("parked %d messages in %s (%.0f parks/s, 16 goroutines)", n, parkTook.Round(time.Millisecond), float64(n)/parkTook.Seconds())
	t.Logf("server fired (no re-admitter running): lateness after retry_at %s", serverFiringLateness(t, n, seconds))
	t.Logf("re-admitted (Admit = one JetStream publish, 16 workers): lateness after retry_at %s; last admitted %s after the first retry_at (%d seconds of schedules)",
		percentiles(admitLate), last.Sub(first).Round(time.Millisecond), seconds)
}

// parkMany parks n messages due over `seconds` seconds starting 4s from now, from 16
// goroutines, and returns their ids and retry_at.
func parkMany(t *testing.T, e *env, rule Rule, n, seconds int) (ids []string, retryAt []time.Time, took time.Duration) {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(4 * time.Second).Truncate(time.Second)
	retryAt = make([]time.Time, n)
	ids = make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				m := newMessage(rule.Name, "key-"+string(rune('a'+i%26)))
				at := base.Add(time.Duration(i%seconds) * time.Second).Add(time.Duration(i%1000) * time.Microsecond)
				fire, err := e.store.Park(ctx, rule.Name, m, at)
				if err != nil {
					t.Error(err)
					return
				}
				retryAt[i], ids[i] = fire, m.ID
			}
		}()
	}
	wg.Wait()
	took = time.Since(start)
	if time.Now().After(base) {
		t.Logf("warning: parking took %s, past the first retry_at; lateness includes it", took)
	}
	return ids, retryAt, took
}

// serverFiringLateness parks n messages with no re-admitter and reads the stored time of
// each fired copy: the server's own share of the lateness.
func serverFiringLateness(t *testing.T, n, seconds int) string {
	t.Helper()
	e := newEnv(t)
	rule := e.rules.add(parkRule("bench", 24*time.Hour))
	ids, retryAt, _ := parkMany(t, e, rule, n, seconds)
	due := make(map[string]time.Time, n)
	for i, id := range ids {
		due[id] = retryAt[i]
	}
	ready := e.store.ReadySubject(rule.Name)
	waittest.Eventually(t, 2*time.Minute, "all fired", func() bool {
		st, err := e.store.handle(context.Background())
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(ready))
		return err == nil && info.State.Subjects[ready] == uint64(n)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := e.store.handle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var late []time.Duration
	for seq := uint64(1); ; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(ready))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		late = append(late, raw.Time.Sub(due[raw.Header.Get(queue.HeaderID)]))
		seq = raw.Sequence + 1
	}
	return percentiles(late)
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	return "p50 " + at(0.50).String() + ", p90 " + at(0.90).String() + ", p99 " + at(0.99).String() + ", max " + s[len(s)-1].Round(time.Millisecond).String()
}
