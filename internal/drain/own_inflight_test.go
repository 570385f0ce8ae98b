package drain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/admin"
	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// holdSink holds every delivery until release is closed (then accepts it) or the delivery's
// context ends (then it is retried): a slow sink with its deliveries in flight.
type holdSink struct {
	entered atomic.Int64
	done    atomic.Int64
	release chan struct{}
}

func newHoldSink() *holdSink { return &holdSink{release: make(chan struct{})} }

func (s *holdSink) Deliver(ctx context.Context, r *rules.Rule, m queue.Message) drain.Outcome {
	s.entered.Add(1)
	select {
	case <-s.release:
		s.done.Add(1)
		return drain.OutcomeDelivered()
	case <-ctx.Done():
		return drain.OutcomeRetry(0, "cancelled")
	}
}

// adminInFlight serves the admin API over e's queues and rules and reads a queue's
// in_flight from it (GET /v1/admin/queues/{name}) and from `sluice queue NAME`.
func adminInFlight(t *testing.T, e *env) (api func(rule string) int64, sluiceQueue func(rule string) string) {
	t.Helper()
	adm := &admin.Admin{Rules: func() *rules.Set {
		set, err := rules.Parse("rules.yaml", []byte(inFlightRules))
		if err != nil {
			t.Error(err)
		}
		return set
	}, Queues: e.q, Scheduler: e.s, JS: e.js}
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	api = func(rule string) int64 {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/admin/queues/" + rule)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var q struct {
			InFlight *int64 `json:"in_flight"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || q.InFlight == nil {
			t.Fatalf("GET /v1/admin/queues/%s: status %d, in_flight %v, %v", rule, resp.StatusCode, q.InFlight, err)
		}
		return *q.InFlight
	}
	sluiceQueue = func(rule string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		m := &cli.Main{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(""),
			Getenv:   func(k string) string { return map[string]string{"SLUICE_URL": srv.URL, "SLUICE_ADMIN_TOKEN": "t"}[k] },
			Terminal: func() bool { return false }}
		if code := m.Run(context.Background(), []string{"queue", rule}); code != 0 {
			t.Fatalf("sluice queue %s: exit %d\n%s%s", rule, code, out.String(), errOut.String())
		}
		return out.String()
	}
	return api, sluiceQueue
}

const inFlightRules = `
domain: infl
descriptors:
  - key: k
    name: infl
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 100}}
    sink: {url: "http://test.invalid", timeout: 30s}
`

func inFlightRule(t *testing.T, e *env) *rules.Rule {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(inFlightRules))
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("infl")
	if err := e.q.Ensure(context.Background(), r.Name, r.Queue.Capacity); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.rules = append(e.rules, r)
	e.mu.Unlock()
	return r
}

// TestAdminInFlightCountsDeliveriesAtTheSink: a slow sink holds one delivery of each of 5
// keys; the admin API's in_flight (and `sluice queue`) reads 5 under either engine — the own
// engine's drainers report it with their ownership renewals, the claim engine's leases are
// counted — and 0 once the sink has answered. Before the own engine reported, it read 0
// while the deliveries were at the sink.
func TestAdminInFlightCountsDeliveriesAtTheSink(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{drain.EngineOwn, drain.EngineClaim} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r := inFlightRule(t, e)
			api, sluiceQueue := adminInFlight(t, e)
			keys := keyNames(5)
			for _, k := range keys {
				e.enqueue(r, k, `{}`) // publish and mark due (the claim engine reads the marks)
			}
			sink := newHoldSink()
			d := e.drainer(context.Background(), sink, func(c *drain.Config) { c.Engine = engine; c.ReconcileEvery = time.Second })
			waittest.Eventually(t, 20*time.Second, "the sink holding a delivery of each key", func() bool { return sink.entered.Load() == int64(len(keys)) })
			held := time.Now()
			waittest.Eventually(t, 20*time.Second, "in_flight reading 5", func() bool { return api(r.Name) == int64(len(keys)) })
			t.Logf("engine %s: in_flight read 5 %v after the 5th delivery reached the sink", engine, time.Since(held).Round(time.Millisecond))
			if out := sluiceQueue(r.Name); !strings.Contains(out, "in flight") || !strings.Contains(out, "5 keys") {
				t.Errorf("sluice queue %s does not show 5 keys in flight:\n%s", r.Name, out)
			}
			close(sink.release)
			waittest.Eventually(t, 20*time.Second, "every delivery answered", func() bool { return sink.done.Load() == int64(len(keys)) })
			answered := time.Now()
			waittest.Eventually(t, 20*time.Second, "in_flight back to 0", func() bool { return api(r.Name) == 0 })
			t.Logf("engine %s: in_flight read 0 %v after the sink answered", engine, time.Since(answered).Round(time.Millisecond))
			d.Stop()
			if n := api(r.Name); n != 0 {
				t.Errorf("after the drainer stopped: in_flight %d, want 0", n)
			}
		})
	}
}

// TestAdminInFlightOfAKilledDrainerExpires: a drainer (own engine) with 4 deliveries at a slow
// sink is killed — its Redis connection closed and its context cancelled, so it hands nothing
// back and reports nothing more. Its report stops counting when its announcement expires
// (OwnLease after its last renewal): in_flight reads 0 within OwnLease + OwnRenew + 1 s of
// the kill, with no drainer left to report.
func TestAdminInFlightOfAKilledDrainerExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := inFlightRule(t, e)
	api, _ := adminInFlight(t, e)
	keys := keyNames(4)
	e.publish(r, keys, 1)
	rdbA := redis.NewClient(redistest.Shared(t).Options())
	t.Cleanup(func() { rdbA.Close() })
	sA, err := queue.NewScheduler(rdbA, queue.SchedulerConfig{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, kill := context.WithCancel(context.Background())
	defer kill()
	sink := newHoldSink()
	const lease, renew = 1500 * time.Millisecond, 500 * time.Millisecond
	a := e.drainer(ctxA, sink, func(c *drain.Config) {
		ownEngine(c)
		c.Scheduler, c.OwnLease, c.OwnRenew = sA, lease, renew
	})
	waittest.Eventually(t, 20*time.Second, "in_flight reading 4", func() bool { return api(r.Name) == int64(len(keys)) })
	rdbA.Close()
	kill()
	killed := time.Now()
	<-a.Done()
	waittest.Eventually(t, 20*time.Second, "the killed drainer's report no longer counted", func() bool { return api(r.Name) == 0 })
	gone := time.Since(killed)
	t.Logf("in_flight read 0 %v after the kill (lease %v, renewal every %v)", gone.Round(time.Millisecond), lease, renew)
	if gone > lease+renew+time.Second {
		t.Errorf("the killed drainer counted for %v, want ≤ %v", gone, lease+renew+time.Second)
	}
}
