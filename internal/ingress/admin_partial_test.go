package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	handlers "github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// restartNATS starts the test's NATS again and waits until the ingress answers through it.
func (e *env) restartNATS() {
	e.t.Helper()
	if err := e.nats.Restart(); err != nil {
		e.t.Fatal(err)
	}
	waittest.Eventually(e.t, 30*time.Second, "the ingress ready after NATS restarted", func() bool {
		return e.do("GET", "/readyz", "").code == 200
	})
}

// A PATCH whose override is stored and whose stream update then fails (NATS stopped
// between the two, for real) is not a 503 "nothing happened": it is a 500
// #stored-not-applied with the stored revision as its ETag, and the same PATCH under
// If-Match of that revision applies it once NATS is back.
func TestAdminTuneStoredNotApplied(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	var fired atomic.Bool
	handlers.SetAdminHooks(e.main.Server, func() {
		if fired.CompareAndSwap(false, true) {
			e.nats.Shutdown() // after the override is written, before the stream update
		}
	}, nil)
	body := `{"capacity":5}`
	p := e.admin("PATCH", "/v1/admin/queues/orders", body)
	if p.code != 500 || p.body["type"] != "https://sluice.dev/problems#stored-not-applied" || p.header.Get("Retry-After") != "" {
		t.Fatalf("PATCH with the stream update failing: %d %v %s", p.code, p.header, p.raw)
	}
	etag := p.header.Get("ETag")
	done, _ := p.body["done"].(map[string]any)
	if etag == "" || etag == `"0"` || done["etag"] != etag || done["override"].(map[string]any)["capacity"] != float64(5) {
		t.Fatalf("the answer does not say what is stored: ETag %q, %s", etag, p.raw)
	}
	e.restartNATS()

	// Stored: the queue's revision is the one the 500 named.
	q := e.admin("GET", "/v1/admin/queues/orders", "")
	if q.code != 200 || q.header.Get("ETag") != etag || q.body["capacity"] != float64(5) {
		t.Fatalf("after restart: %d ETag %q (want %s) %s", q.code, q.header.Get("ETag"), etag, q.raw)
	}
	// The same patch under If-Match of that revision is not refused as someone else's
	// change: it goes through and updates the stream.
	again := e.do("PATCH", "/v1/admin/queues/orders", body, "Authorization", "Bearer "+e.token, "If-Match", etag)
	if again.code != 200 || again.body["capacity"] != float64(5) {
		t.Fatalf("PATCH again under If-Match %s: %d %s", etag, again.code, again.raw)
	}
	for i := 1; i <= 6; i++ {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `1`))
		if want := map[bool]int{true: 202, false: 429}[i <= 5]; r.code != want {
			t.Fatalf("message %d with capacity 5 applied: %d %s", i, r.code, r.raw)
		}
	}
}

// deadLetters makes n dead letters of rule orders, one per key m-1 … m-n, oldest first.
func deadLetters(t *testing.T, e *env, n int) []string {
	t.Helper()
	_, js := natstest.Connect(t, e.nats.URL())
	set, err := rules.Parse("t.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("m-%d", i)
		id, err := queue.NewID("orders", key)
		if err != nil {
			t.Fatal(err)
		}
		m := queue.Message{ID: id, Rule: "orders", Key: key, Payload: []byte(`1`), CreatedAt: time.Now(), Attempt: 3}
		if err := dead.Dead(context.Background(), set.Rule("orders").Name, m, "max attempts reached"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// A replay of every dead letter answers where it stopped: with next when its limit ended
// it, and, when NATS fails after some letters were replayed (stopped for real after the
// second), with a 500 #partially-applied holding the counts so far and the next URL that
// replays the rest — never a 503 whose retry would replay more than asked.
func TestAdminReplayAllPartial(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	deadLetters(t, e, 4)

	first := e.admin("POST", "/v1/admin/dead/replay?queue=orders&limit=1", "")
	next, _ := first.body["next"].(string)
	if first.code != 200 || first.body["replayed"] != float64(1) || next == "" {
		t.Fatalf("limit 1 of 4: %d %s", first.code, first.raw)
	}
	if u, err := url.Parse(next); err != nil || u.Path != "/v1/admin/dead/replay" || u.Query().Get("limit") != "1" || u.Query().Get("after") == "" {
		t.Fatalf("next %q", next)
	}
	// Continue with a larger limit; NATS stops once the second letter of this call is in.
	var armed atomic.Bool
	armed.Store(true)
	handlers.SetAdminHooks(e.main.Server, nil, func(n int) {
		if n == 1 && armed.CompareAndSwap(true, false) {
			e.nats.Shutdown()
		}
	})
	nu, _ := url.Parse(next)
	qv := nu.Query()
	qv.Set("limit", "10")
	p := e.admin("POST", "/v1/admin/dead/replay?"+qv.Encode(), "")
	done, _ := p.body["done"].(map[string]any)
	cont, _ := p.body["next"].(string)
	if p.code != 500 || p.body["type"] != "https://sluice.dev/problems#partially-applied" || done["replayed"] != float64(1) || cont == "" {
		t.Fatalf("NATS stopped after one letter: %d %s", p.code, p.raw)
	}
	if cu, _ := url.Parse(cont); cu.Query().Get("limit") != "9" {
		t.Fatalf("next of the partial answer %q: want the 9 letters left of the limit", cont)
	}
	e.restartNATS()

	rest := e.admin("POST", cont, "")
	if rest.code != 200 || rest.body["replayed"] != float64(2) || rest.body["next"] != nil {
		t.Fatalf("continuing at %s: %d %s", cont, rest.code, rest.raw)
	}
	// Each letter replayed exactly once: one message in each key, none dead.
	for i := 1; i <= 4; i++ {
		if k := e.admin("GET", fmt.Sprintf("/v1/admin/queues/orders/keys/m-%d", i), ""); k.body["depth"] != float64(1) {
			t.Fatalf("key m-%d after the replays: %s", i, k.raw)
		}
	}
	if l := e.admin("GET", "/v1/admin/dead?queue=orders", ""); len(l.body["messages"].([]any)) != 0 {
		t.Fatalf("dead letters left: %s", l.raw)
	}
}

// The Go client reads both answers for what they are, against the real ingress with NATS
// stopped right after the change: a Tune under If-Match whose override was stored is
// ErrPartiallyApplied with the stored revision — not retried, and not reported as
// someone else's change (ErrPreconditionFailed) — and that revision applies it; a
// replay of every dead letter that failed part way returns its counts with the error,
// and its Next replays the rest, each letter once.
func TestClientReadsPartialAnswers(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	deadLetters(t, e, 3)
	c, err := client.New(e.base, client.WithAdminToken(e.token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := c.Admin()
	q, err := admin.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	handlers.SetAdminHooks(e.main.Server, func() {
		if stopped.CompareAndSwap(false, true) {
			e.nats.Shutdown()
		}
	}, nil)
	capacity := int64(5)
	patch := client.Patch{Capacity: &capacity, IfMatch: q.ETag}
	_, err = admin.Tune(ctx, "orders", patch)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrPartiallyApplied) || errors.Is(err, client.ErrPreconditionFailed) || errors.Is(err, client.ErrUnavailable) ||
		!errors.As(err, &pe) || pe.Attempts != 1 || pe.ETag == "" || pe.ETag == q.ETag {
		t.Fatalf("Tune with the stream update failing: %v (%+v)", err, pe)
	}
	e.restartNATS()
	patch.IfMatch = pe.ETag
	if q, err = admin.Tune(ctx, "orders", patch); err != nil || q.Capacity != 5 {
		t.Fatalf("Tune again under the stored revision %s: %+v %v", pe.ETag, q, err)
	}

	handlers.SetAdminHooks(e.main.Server, nil, func(n int) {
		if n == 1 && stopped.CompareAndSwap(true, false) {
			e.nats.Shutdown()
		}
	})
	r, err := admin.ReplayAll(ctx, "orders", 0)
	if !errors.Is(err, client.ErrPartiallyApplied) || r == nil || r.Replayed != 1 || r.Next == nil || r.Next.After == "" || r.Next.Queue != "orders" {
		t.Fatalf("ReplayAll stopped part way: %+v %v", r, err)
	}
	e.restartNATS()
	rest, err := admin.ReplayDead(ctx, *r.Next)
	if err != nil || rest.Replayed != 2 || rest.Next != nil {
		t.Fatalf("ReplayDead(%+v): %+v %v", *r.Next, rest, err)
	}
	if dead, err := admin.Dead(ctx, "orders"); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters left: %v %v", dead, err)
	}
}

// A purge the store carried out but whose answer was lost (replies dropped by a relay
// between the ingress and NATS, for real) is not a 503 "nothing done": it is a 500
// #outcome-unknown — and the key is indeed purged. With NATS stopped (nothing can be
// sent) it is the 503.
func TestAdminPurgeAnswerLostIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var relay *natstest.Relay
	e := start(t, func(c *ingress.Config) {
		relay = natstest.StartRelay(t, c.NATSURL)
		c.NATSURL = relay.URL()
	})
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `1`)); r.code != 202 {
		t.Fatalf("submit: %d %s", r.code, r.raw)
	}
	relay.DropReplies(true)
	if r := e.admin("DELETE", "/v1/admin/queues/orders/keys/m-1", ""); r.code != 500 || r.body["type"] != "https://sluice.dev/problems#outcome-unknown" {
		t.Fatalf("purge of a key whose answer was lost: %d %s", r.code, r.raw)
	}
	_, js := natstest.Connect(t, e.nats.URL())
	st, err := js.Stream(context.Background(), "SLUICE_Q_orders")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the stream after the lost answer: %+v %v, want the key purged", info.State, err)
	}
	e.nats.Shutdown()
	if r := e.admin("DELETE", "/v1/admin/queues/orders/keys/m-1", ""); r.code != 503 {
		t.Fatalf("purge with NATS stopped: %d %s", r.code, r.raw)
	}
}

// A replay whose message went back into its queue and whose dead letter could then not be
// removed (NATS stopped for real in between) is the 202 of a replay that worked, saying
// the dead letter is still listed — not a 503 whose retry replays it again.
func TestAdminReplayQueuedButStillListed(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	ids := deadLetters(t, e, 1)
	var fired atomic.Bool
	handlers.SetAdminAfterAdmit(e.main.Server, func() {
		if fired.CompareAndSwap(false, true) {
			e.nats.Shutdown()
		}
	})
	r := e.admin("POST", "/v1/admin/dead/"+ids[0]+"/replay", "")
	if r.code != 202 || r.body["state"] != "queued" || r.body["dead_letter_removed"] != false || r.header.Get("Location") != "/v1/messages/"+ids[0] {
		t.Fatalf("replay with NATS stopped after the admission: %d %s", r.code, r.raw)
	}
	e.restartNATS()
	if k := e.admin("GET", "/v1/admin/queues/orders/keys/m-1", ""); k.body["depth"] != float64(1) {
		t.Fatalf("the replayed message is not queued: %s", k.raw)
	}
	if l := e.admin("GET", "/v1/admin/dead?queue=orders", ""); len(l.body["messages"].([]any)) != 1 {
		t.Fatalf("the dead letter, as the answer said, is still listed: %s", l.raw)
	}
}
