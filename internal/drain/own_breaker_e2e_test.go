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

	"github.com/sluice-io/sluice/internal/admin"
	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sink"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// adminQueue is the part of GET /v1/admin/queues/{name} this test reads.
type adminQueue struct {
	Dead    uint64 `json:"dead"`
	Breaker *struct {
		State    string `json:"state"`
		Drainers []struct {
			Drainer   string `json:"drainer"`
			State     string `json:"state"`
			NextProbe string `json:"next_probe_at"`
		} `json:"drainers"`
	} `json:"breaker"`
}

// TestSteerBreakerVisibleOwnEngine: end to end with a real HTTP sink that answers 500 for
// every key, two drainers (own engine), the admin API and `sluice queues` as an operator
// runs them. The breaker opens; GET /v1/admin/queues/{name} and `sluice queues` say open
// (each drainer's state, the rule's the worst); only probes reach the sink while it is
// open; the sink recovers, a probe closes the breaker and both say closed; every message is
// delivered, and the attempt numbers the sink saw for each message run 1, 2, 3 … without a
// gap, the most of them the failures before the breaker opened plus the probes the message
// carried: a delivery refused by the breaker spent no attempt (a probe is a real attempt).
func TestSteerBreakerVisibleOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := sinktest.Start(t)
	var down atomic.Bool
	down.Store(true)
	hs.Answer(func(sinktest.Delivery) (int, string) {
		if down.Load() {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	set, err := rules.Parse("rules.yaml", []byte(strings.ReplaceAll(`
domain: brk
descriptors:
  - key: k
    name: brk
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 20}}
    sink:
      url: SINK
      timeout: 2s
      breaker: {failures: 4, min_keys: 2, within: 5s, cool_down: 1s, max_cool_down: 1s}
    delivery: {max_attempts: 10, min_backoff: 10ms, max_backoff: 40ms}
`, "SINK", hs.URL)))
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("brk")
	if err := e.q.Ensure(context.Background(), r.Name, r.Queue.Capacity); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.rules = append(e.rules, r)
	e.mu.Unlock()
	keys := keyNames(6)
	e.publish(r, keys, 5)

	adm := &admin.Admin{Rules: func() *rules.Set { return set }, Queues: e.q, Scheduler: e.s, JS: e.js}
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	get := func() adminQueue {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/admin/queues/brk")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var q adminQueue
		if err := json.NewDecoder(resp.Body).Decode(&q); err != nil {
			t.Fatal(err)
		}
		return q
	}
	sluice := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		m := &cli.Main{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(""),
			Getenv:   func(k string) string { return map[string]string{"SLUICE_URL": srv.URL, "SLUICE_ADMIN_TOKEN": "t"}[k] },
			Terminal: func() bool { return false }}
		if code := m.Run(context.Background(), args); code != 0 {
			t.Fatalf("sluice %v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	sluiceQueues := func() string { return sluice("queues") }
	if q := get(); q.Breaker == nil || q.Breaker.State != "closed" || len(q.Breaker.Drainers) != 0 {
		t.Fatalf("before any delivery: breaker %+v, want closed with no drainer listed", q.Breaker)
	}

	httpSink, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.drainer(context.Background(), httpSink, ownEngine)
	}
	waittest.Eventually(t, 20*time.Second, "the admin API shows the breaker open", func() bool {
		q := get()
		return q.Breaker != nil && q.Breaker.State == "open"
	})
	opened := time.Now()
	atOpen := len(hs.All())
	q := get()
	t.Logf("breaker open after %d attempts: %+v", atOpen, q.Breaker)
	if q.Breaker.Drainers[0].NextProbe == "" && (len(q.Breaker.Drainers) < 2 || q.Breaker.Drainers[1].NextProbe == "") {
		t.Errorf("no open drainer names its next probe: %+v", q.Breaker)
	}
	if out := sluiceQueues(); !strings.Contains(out, "BREAKER") || !strings.Contains(out, " open (") {
		t.Errorf("sluice queues does not show the breaker open:\n%s", out)
	} else {
		t.Logf("sluice queues while open:\n%s", out)
	}
	if out := sluice("queue", "brk"); !strings.Contains(out, "breaker") || !strings.Contains(out, "next probe") {
		t.Errorf("sluice queue brk does not show each drainer's breaker:\n%s", out)
	}

	// Open for 3 s: one probe per drainer per 1 s cool-down reaches the sink, nothing else.
	waittest.Eventually(t, 10*time.Second, "3 s of outage with the breaker open", func() bool { return time.Since(opened) > 3*time.Second })
	during := len(hs.All()) - atOpen
	down.Store(false)
	recovered := time.Now()
	t.Logf("%d attempts reached the sink in the 3 s the breaker was open (2 drainers, cool-down 1 s)", during)
	if during > 2*4+2 {
		t.Errorf("%d attempts while the breaker was open, want probes only (≤ 10)", during)
	}
	waittest.Eventually(t, 20*time.Second, "the admin API shows the breaker closed", func() bool {
		q := get()
		return q.Breaker != nil && q.Breaker.State == "closed"
	})
	t.Logf("closed %v after the sink recovered", time.Since(recovered).Round(time.Millisecond))
	if out := sluiceQueues(); strings.Contains(out, " open") || !strings.Contains(out, "closed") {
		t.Errorf("sluice queues does not show the breaker closed:\n%s", out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("accepted %d of %d; attempts %d", len(hs.Accepted()), len(keys)*5, len(hs.All()))
		}
	})
	waittest.Eventually(t, 30*time.Second, "every message delivered", func() bool { return len(hs.Accepted()) >= len(keys)*5 })
	seen := map[string][]int{}
	for _, d := range hs.All() {
		seen[d.ID] = append(seen[d.ID], d.Attempt)
	}
	most := 0
	for id, as := range seen {
		most = max(most, len(as))
		for i, a := range as {
			if a != i+1 {
				t.Errorf("message %s: attempts seen by the sink %v, want 1, 2, 3 … (an attempt spent without reaching it)", id, as)
				break
			}
		}
	}
	t.Logf("%d messages delivered in %d attempts; the most attempts of one message %d (max_attempts 10)", len(hs.Accepted()), len(hs.All()), most)
}

// TestSteerBreakerRecordClearedOwnEngine: a drainer's published breaker record goes when a
// rules reload turns sink.breaker off (the rule's deliveries go on, nothing is paused any
// more) and when the drainer stops, so the admin API never shows a breaker that holds
// nothing back.
func TestSteerBreakerRecordClearedOwnEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := sinktest.Start(t)
	hs.Answer(func(sinktest.Delivery) (int, string) { return http.StatusInternalServerError, "" })
	r := e.rule("brkclear", 20, 0, func(r *rules.Rule) {
		r.Sink.URL = hs.URL
		r.Delivery.MaxAttempts = 1000
		r.Sink.Breaker = rules.Breaker{Enabled: true, Failures: 4, MinKeys: 2, Within: 5 * time.Second, CoolDown: time.Second, MaxCoolDown: time.Second}
	})
	e.publish(r, keyNames(4), 5)
	httpSink, err := sink.NewHTTP(sink.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	records := func() []queue.BreakerRecord {
		recs, err := e.s.Steering.Breakers(ctx, r.Name, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	d := e.drainer(ctx, httpSink, ownEngine)
	waittest.Eventually(t, 20*time.Second, "the breaker record says open", func() bool {
		recs := records()
		return len(recs) == 1 && recs[0].State == "open"
	})
	// The rules reload: the same rule without sink.breaker.
	off := *r
	off.Sink.Breaker = rules.Breaker{}
	e.mu.Lock()
	e.rules = []*rules.Rule{&off}
	e.mu.Unlock()
	waittest.Eventually(t, 10*time.Second, "the record gone after sink.breaker was turned off", func() bool { return len(records()) == 0 })

	// On again: it opens again (the sink still fails), and the drainer's stop removes it.
	e.mu.Lock()
	e.rules = []*rules.Rule{r}
	e.mu.Unlock()
	waittest.Eventually(t, 20*time.Second, "the breaker record says open again", func() bool {
		recs := records()
		return len(recs) == 1 && recs[0].State == "open"
	})
	d.Stop()
	if recs := records(); len(recs) != 0 {
		t.Errorf("after the drainer stopped: %+v, want no record", recs)
	}
}
