package retry

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

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
