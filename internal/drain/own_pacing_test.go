package drain_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// slowEverySecondSink takes slow to answer every second delivery, fast the others, and
// records when each delivery reached it.
type slowEverySecondSink struct {
	slow time.Duration
	mu   sync.Mutex
	at   []time.Time
}

func (s *slowEverySecondSink) Deliver(ctx context.Context, _ *rules.Rule, _ queue.Message) drain.Outcome {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	n := len(s.at)
	s.mu.Unlock()
	if n%2 == 1 {
		time.Sleep(s.slow) // the scenario: a slow answer
	}
	return drain.OutcomeDelivered()
}

// TestOwnEngineSlowDeliveryDoesNotBunchTheNext: a key at its outflow (20/s, one delivery in
// flight) whose deliveries alternately take 90 ms and ~0 ms. Each slow delivery ends 40 ms
// into the next slot; that dispatch "keeps the grid" (less than one interval late), so the
// one after it went 10 ms later: two deliveries of the key reached the sink 10 ms apart at
// 20/s. Found by the fault rows of integration/faults_own_test.go (pairs 4–10 ms apart after
// a NATS leader kill and a Redis Cluster failover). The grid rule is meant for a late timer;
// a dispatch later than timer jitter now counts the next slot from itself.
func TestOwnEngineSlowDeliveryDoesNotBunchTheNext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("slow-every-second", 20, 0, nil)
	const n = 20
	e.publish(r, []string{"k"}, n)
	s := &slowEverySecondSink{slow: 90 * time.Millisecond}
	e.drainer(context.Background(), s, ownEngine)
	waittest.Eventually(t, 30*time.Second, "every message delivered", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.at) >= n
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	closest := time.Hour
	for i := 1; i < len(s.at); i++ {
		closest = min(closest, s.at[i].Sub(s.at[i-1]))
	}
	if closest < 40*time.Millisecond {
		t.Errorf("two deliveries of one key %v apart at 20/s (want ≥ 50 ms less a little jitter)", closest)
	}
}
