package drain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// A message written by a newer sluice (a stored format this drainer does not know) is
// dead-lettered with that reason instead of delivered misread, and the key goes on.
func TestNewerFormatIsDeadLetteredSayingSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.rule("newer-format", 1000, 0, nil)
	ctx := context.Background()
	newer := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Rule: r.Name, Key: "k", Payload: []byte(`{"v":3}`), CreatedAt: time.Now()}
	nm := queue.EncodeMessage(e.q.Subject(r.Name, "k"), newer)
	nm.Header.Set("Sluice-Format", "4")
	if _, err := e.js.PublishMsg(ctx, nm); err != nil {
		t.Fatal(err)
	}
	after := e.enqueue(r, "k", `{"v":2}`)
	sink := &recSink{}
	dead := &deadRec{}
	e.drainer(ctx, sink, func(c *drain.Config) { c.DeadLetters = dead })
	waittest.Eventually(t, 10*time.Second, "the newer message dead and the next one delivered", func() bool { return dead.count() == 1 && sink.count() == 1 })
	if dead.msgs[0].ID != newer.ID || !strings.Contains(dead.why[0], "written by a newer sluice") {
		t.Errorf("dead letter %s (%q), want %s saying a newer sluice wrote it", dead.msgs[0].ID, dead.why[0], newer.ID)
	}
	if got := sink.deliveries()[0]; got.ID != after.ID || got.Payload != `{"v":2}` {
		t.Errorf("delivered %s %s, want %s", got.ID, got.Payload, after.ID)
	}
}
