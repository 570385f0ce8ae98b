package drain_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRedisOutagePausesAndReconcileRepairs: with Redis down the drainer pauses claiming
// (one throttled log line, no crash); Redis comes back empty (no persistence), so the
// messages admitted meanwhile have no due entry — the reconciler finds them in the stream
// and they are delivered.
//
// Claim engine (its reconciler); own: TestOwnEngineRedisOutageStopsByTheLeaseAndResumes.
func TestRedisOutagePausesAndReconcileRepairs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := redistest.Start(t, redistest.Options{TCP: true})
	opts := srv.Options()
	opts.MaxRetries = -1
	opts.DialerRetries = 1 // a claim fails at once while Redis is down (not after 5 dials 100 ms apart)
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	s, err := queue.NewScheduler(rdb, queue.SchedulerConfig{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	r := e.rule("outage", 1000, 0, nil)
	logs := &syncBuffer{}
	sink := &recSink{}
	d := e.drainer(context.Background(), sink, func(c *drain.Config) {
		claimEngine(c)
		c.RedisBackoff = 20 * time.Millisecond
		c.ReconcileEvery = 50 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	e.enqueue(r, "k", `1`)
	waittest.Eventually(t, 20*time.Second, "first delivery", func() bool { return sink.count() == 1 })

	srv.Stop()
	// Admitted while Redis is down: stored in JetStream, but the ingress cannot mark it due.
	m := queue.Message{ID: "during-outage", Rule: r.Name, Key: "k2", Payload: []byte(`2`)}
	if _, err := e.q.Enqueue(context.Background(), r.Name, m); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 20*time.Second, "the outage to be noticed", func() bool { return strings.Contains(logs.String(), "claiming paused") })
	// Several more failed claims (RedisBackoff 20 ms) show the log is throttled.
	sig := drain.SignalsOf(d)
	sig.Wait(t, 10*time.Second, drain.ClaimFailed, sig.Count(drain.ClaimFailed)+5)
	if n := strings.Count(logs.String(), "claiming paused"); n != 1 {
		t.Errorf("%d 'claiming paused' lines over %d failed claims: not throttled\n%s", n, sig.Count(drain.ClaimFailed), logs.String())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, 30*time.Second, "delivery of the message admitted during the outage", func() bool { return sink.count() == 2 })
	if got := sink.deliveries()[1]; got.ID != "during-outage" {
		t.Fatalf("delivered %+v", got)
	}
	waittest.Eventually(t, 10*time.Second, "resume log", func() bool { return strings.Contains(logs.String(), "claiming resumed") })
	if !strings.Contains(logs.String(), "reconcile: scheduled keys") {
		t.Errorf("the repair was not logged:\n%s", logs.String())
	}
}
