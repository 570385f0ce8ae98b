package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
)

// The client against the real thing: an ingress (ingress.Main, as cmd/ingress runs it)
// with an in-process drainer and re-admitter, a real NATS server, a real Redis and a
// recording sink. The httptest scripts of the other tests check that the client reads
// the answers of docs/http-api.md; these check that its retry policy, against sluice's actual
// answers, does what the package doc promises.

const systemToken = "client-system-token"

// systemRules: SINK is replaced by the recording sink's URL.
const systemRules = `
domain: burst
descriptors:
  - key: k
    name: burst
    queue: {capacity: 5, outflow: {unit: second, requests_per_unit: 20}}
    overflow: reject
    sink: {url: "SINK/burst", timeout: 5s}
---
domain: even
descriptors:
  - key: k
    name: even
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    overflow: reject
    sink: {url: "SINK/even", timeout: 5s}
---
domain: fragile
descriptors:
  - key: k
    name: fragile
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 50}}
    sink: {url: "SINK/fragile", timeout: 5s}
---
domain: login
descriptors:
  - key: user
    name: login
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// system is one running sluice.
type system struct {
	base string
	sink *sinktest.Sink
	rt   *countingTransport
}

func startSystem(t *testing.T, rulesYAML string) *system {
	t.Helper()
	sink := sinktest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(rulesYAML, "SINK", sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-status-keep", "1h", "-readmit-max-backoff", "2s", "-shutdown-timeout", "2s", "-admin-token", systemToken},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &system{base: "http://" + m.Addr.String(), sink: sink, rt: &countingTransport{next: http.DefaultTransport}}
}

// client returns a client with the default retry policy (real clock) whose requests are counted.
func (s *system) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(s.base, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: s.rt, Timeout: 10 * time.Second})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countingTransport counts requests and their answers' status codes.
type countingTransport struct {
	next http.RoundTripper

	mu       sync.Mutex
	requests int
	statuses map[int]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if c.statuses == nil {
		c.statuses = map[int]int{}
	}
	if err == nil {
		c.statuses[resp.StatusCode]++
	}
	return resp, err
}

// snapshot returns the requests so far and a copy of the status counts.
func (c *countingTransport) snapshot() (int, map[int]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int]int{}
	for k, v := range c.statuses {
		m[k] = v
	}
	return c.requests, m
}

func TestSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, Redis and an ingress")
	}
	t.Parallel()
	sys := startSystem(t, systemRules)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A burst of 40 into a queue much smaller than the burst, from 8 goroutines, with the
	// client's default policy (429s retried after Retry-After with the same idempotency
	// key): every message is accepted exactly once, and the whole takes about what the
	// outflow allows. Both queues at once (they are independent rules).
	t.Run("burst beyond capacity", func(t *testing.T) {
		for _, b := range []burst{
			{domain: "burst", key: "burst/1 🙂", total: 40, workers: 8, capacity: 5, rate: 20},
			{domain: "even", key: "e", total: 40, workers: 8, capacity: 10, rate: 10},
		} {
			t.Run(b.domain, func(t *testing.T) {
				t.Parallel()
				b.run(ctx, t, sys)
			})
		}
	})

	t.Run("a repeat of an idempotency key is answered with the original", func(t *testing.T) {
		c := sys.client(t)
		key := []client.Entry{{Key: "k", Value: "idem"}}
		a, err := c.Submit(ctx, "burst", key, 1, client.WithIdempotencyKey("order-991"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Submit(ctx, "burst", key, 1, client.WithIdempotencyKey("order-991"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Duplicate || !b.Duplicate || a.ID != b.ID {
			t.Fatalf("first %+v\nrepeat %+v", a, b)
		}
	})

	t.Run("check-only rule", func(t *testing.T) {
		c := sys.client(t)
		who := [][]client.Entry{{{Key: "user", Value: "alice"}}}
		for i := range 3 {
			r, err := c.Check(ctx, "login", who, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() || len(r.Statuses) != 1 || r.Statuses[0].LimitRemaining != int64(2-i) ||
				r.Statuses[0].CurrentLimit == nil || r.Statuses[0].CurrentLimit.RequestsPerUnit != 3 {
				t.Fatalf("check %d: %+v %+v", i+1, r, r.Statuses)
			}
		}
		before, _ := sys.rt.snapshot()
		r, err := c.Check(ctx, "login", who, 1)
		if err != nil {
			t.Fatalf("an over-limit check is an answer, not an error: %v", err)
		}
		if after, _ := sys.rt.snapshot(); after-before != 1 {
			t.Fatalf("an over-limit check made %d requests; a check is never retried on 429", after-before)
		}
		if r.OK() || r.OverallCode != client.CodeOverLimit || r.Statuses[0].Code != client.CodeOverLimit ||
			r.RateLimit.RetryAfter < time.Second || r.Statuses[0].DurationUntilReset <= 0 {
			t.Fatalf("4th check: %+v %+v %+v", r, r.Statuses[0], r.RateLimit)
		}
	})

	t.Run("refusals that cannot succeed are not retried", func(t *testing.T) {
		c := sys.client(t)
		for _, tc := range []struct {
			name   string
			call   func() error
			status int
			is     error
		}{
			{"400 key too long", func() error {
				_, err := c.Submit(ctx, "burst", []client.Entry{{Key: "k", Value: strings.Repeat("x", 300)}}, 1)
				return err
			}, http.StatusBadRequest, client.ErrInvalid},
			{"404 no rule", func() error {
				_, err := c.Submit(ctx, "no-such-domain", []client.Entry{{Key: "k", Value: "v"}}, 1)
				return err
			}, http.StatusNotFound, client.ErrNoRule},
			{"404 unknown message", func() error {
				_, err := c.Status(ctx, "0193a1b2-0000-7000-8000-000000000000")
				return err
			}, http.StatusNotFound, client.ErrNotFound},
			{"401 admin without a token", func() error {
				_, err := c.Admin().Queues(ctx)
				return err
			}, http.StatusUnauthorized, client.ErrUnauthorized},
		} {
			before, _ := sys.rt.snapshot()
			err := tc.call()
			after, _ := sys.rt.snapshot()
			var pe *client.ProblemError
			if !errors.As(err, &pe) || pe.Status != tc.status || !errors.Is(err, tc.is) {
				t.Errorf("%s: %v", tc.name, err)
			}
			if after-before != 1 {
				t.Errorf("%s: %d requests, want 1", tc.name, after-before)
			}
			if tc.status == http.StatusBadRequest && (pe == nil || pe.Field == "") {
				t.Errorf("%s: the problem names no field: %+v", tc.name, pe)
			}
		}
	})

	t.Run("admin round trip", func(t *testing.T) {
		a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
		qs, err := a.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 3 || qs[0].Name != "burst" || qs[0].Capacity != 5 || qs[0].Outflow == nil || qs[0].Outflow.RequestsPerUnit != 20 {
			t.Fatalf("queues %+v", qs)
		}
		capacity := int64(7)
		q, err := a.Tune(ctx, "burst", client.Patch{Capacity: &capacity, Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 50}})
		if err != nil {
			t.Fatal(err)
		}
		if q.Capacity != 7 || q.Outflow == nil || q.Outflow.RequestsPerUnit != 50 || q.Outflow.Unit != "second" {
			t.Fatalf("tuned %+v %+v", q, q.Outflow)
		}
		// GET shows it too (every process applies it within a second).
		q = waitQueue(ctx, t, a, "burst", func(q *client.Queue) bool { return q.Capacity == 7 })
		if q.Outflow.RequestsPerUnit != 50 {
			t.Fatalf("after tuning: %+v", q)
		}
		// A submission now reports the tuned capacity.
		sub, err := sys.client(t).Submit(ctx, "burst", []client.Entry{{Key: "k", Value: "tuned"}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if sub.Capacity != 7 {
			t.Fatalf("submission after tuning: %+v", sub)
		}

		k, err := a.Key(ctx, "burst", "burst/1 🙂") // drained by now (the burst subtest waited for the sink)
		if err != nil {
			t.Fatal(err)
		}
		if k.Queue != "burst" || k.Key != "burst/1 🙂" || k.Depth != 0 {
			t.Fatalf("key %+v", k)
		}
		q, err = a.Reset(ctx, "burst")
		if err != nil {
			t.Fatal(err)
		}
		if q.Capacity != 5 || q.Outflow.RequestsPerUnit != 20 {
			t.Fatalf("reset %+v", q)
		}
		waitQueue(ctx, t, a, "burst", func(q *client.Queue) bool { return q.Capacity == 5 })

		if _, err := a.Queue(ctx, "no-such-queue"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("unknown queue: %v", err)
		}
		dead, err := a.Dead(ctx, "burst")
		if err != nil || len(dead) != 0 {
			t.Fatalf("dead: %v %v", dead, err)
		}
	})

	t.Run("purge", func(t *testing.T) {
		a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
		c := sys.client(t)
		paused := true
		if _, err := a.Tune(ctx, "even", client.Patch{Paused: &paused}); err != nil {
			t.Fatal(err)
		}
		defer a.Reset(ctx, "even")
		waitQueue(ctx, t, a, "even", func(q *client.Queue) bool { return q.Paused })
		for _, k := range []string{"p/1", "p/1", "p/1", "p 2", "p 2"} {
			if _, err := c.Submit(ctx, "even", []client.Entry{{Key: "k", Value: k}}, k); err != nil {
				t.Fatal(err)
			}
		}
		if k, err := a.Key(ctx, "even", "p/1"); err != nil || k.Depth != 3 {
			t.Fatalf("before PurgeKey: %+v %v", k, err)
		}
		if err := a.PurgeKey(ctx, "even", "p/1"); err != nil {
			t.Fatal(err)
		}
		if k, err := a.Key(ctx, "even", "p/1"); err != nil || k.Depth != 0 {
			t.Fatalf("after PurgeKey: %+v %v", k, err)
		}
		hot, complete, err := a.HotKeys(ctx, "even", 5)
		if err != nil || !complete || len(hot) != 1 || hot[0].Key != "p 2" || hot[0].Depth != 2 || hot[0].Queue != "even" {
			t.Fatalf("HotKeys after PurgeKey: %+v %v %v", hot, complete, err)
		}
		if q, err := a.Queue(ctx, "even"); err != nil || q.OldestAge == nil || *q.OldestAge < 0 {
			t.Fatalf("oldest age of a paused queue with messages: %+v %v", q, err)
		}
		if k, err := a.Key(ctx, "even", "p 2"); err != nil || k.Depth != 2 {
			t.Fatalf("another key after PurgeKey: %+v %v", k, err)
		}
		if err := a.PurgeQueue(ctx, "even"); err != nil {
			t.Fatal(err)
		}
		if q, err := a.Queue(ctx, "even"); err != nil || q.Depth != 0 {
			t.Fatalf("after PurgeQueue: %+v %v", q, err)
		}
		if err := a.PurgeQueue(ctx, "no-such-queue"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("purge of an unknown queue: %v", err)
		}
	})

	// SubmitBatch: one request for many messages; items refused for a full queue go again
	// after their own Retry-After until accepted, a final refusal stays with its item.
	t.Run("batch", func(t *testing.T) {
		c := sys.client(t)
		var items []client.BatchItem
		for i := 0; i < 8; i++ {
			items = append(items, client.BatchItem{Domain: "burst", Descriptor: []client.Entry{{Key: "k", Value: "batch"}}, Payload: i})
		}
		items = append(items, client.BatchItem{Domain: "no-such-domain", Descriptor: []client.Entry{{Key: "k", Value: "x"}}, Payload: 1})
		res, err := c.SubmitBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		retried := 0
		for i, r := range res[:8] {
			if r.Err != nil || r.Submission == nil || r.Submission.ID == "" || r.Submission.IdempotencyKey == "" {
				t.Fatalf("item %d: %+v", i, r)
			}
			if r.Submission.Attempts > 1 {
				retried++
			}
		}
		if retried == 0 {
			t.Errorf("8 messages into a queue of 5 all accepted in the first round: nothing was retried")
		}
		if !errors.Is(res[8].Err, client.ErrNoRule) {
			t.Fatalf("item of an unknown domain: %+v", res[8])
		}
		// Resubmitting the same items (same keys) is answered as repeats, nothing stored twice.
		for i := range items[:8] {
			items[i].IdempotencyKey = res[i].Submission.IdempotencyKey
		}
		again, err := c.SubmitBatch(ctx, items[:8])
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range again {
			if r.Err != nil || !r.Submission.Duplicate || r.Submission.ID != res[i].Submission.ID {
				t.Fatalf("repeat of item %d: %+v (first %+v)", i, r, res[i].Submission)
			}
		}
	})

	// A scheduled message: ETA at its time, status scheduled with DeliverAt, cancellable.
	t.Run("scheduled", func(t *testing.T) {
		c := sys.client(t)
		at := time.Now().Add(time.Hour)
		sub, err := c.Submit(ctx, "even", []client.Entry{{Key: "k", Value: "later"}}, "reminder", client.WithDeliverAt(at))
		if err != nil || sub.State != client.StateScheduled || sub.ETA.Before(at) || sub.ETA.After(at.Add(time.Second)) {
			t.Fatalf("scheduled submit: %+v %v", sub, err)
		}
		st, err := c.Status(ctx, sub.ID)
		if err != nil || st.State != client.StateScheduled || st.DeliverAt.Before(at.Truncate(time.Second)) {
			t.Fatalf("status: %+v %v", st, err)
		}
		if _, err := c.Cancel(ctx, sub.ID); err != nil {
			t.Fatal(err)
		}
		d, err := c.Submit(ctx, "even", []client.Entry{{Key: "k", Value: "later"}}, "soon", client.WithDelay(time.Minute))
		if err != nil || d.State != client.StateScheduled || time.Until(d.ETA) < 58*time.Second {
			t.Fatalf("WithDelay: %+v %v", d, err)
		}
		c.Cancel(ctx, d.ID)
	})

	// Cancel takes back a queued message; its status is cancelled then (records are kept).
	t.Run("cancel", func(t *testing.T) {
		a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
		c := sys.client(t)
		paused := true
		if _, err := a.Tune(ctx, "even", client.Patch{Paused: &paused}); err != nil {
			t.Fatal(err)
		}
		defer a.Reset(ctx, "even")
		waitQueue(ctx, t, a, "even", func(q *client.Queue) bool { return q.Paused })
		key := []client.Entry{{Key: "k", Value: "to cancel"}}
		var subs []*client.Submission
		for i := 0; i < 2; i++ {
			sub, err := c.Submit(ctx, "even", key, i)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		st, err := c.Cancel(ctx, subs[1].ID)
		if err != nil || st.State != client.StateQueued || st.ID != subs[1].ID || st.Position != 1 {
			t.Fatalf("cancel: %+v %v", st, err)
		}
		// This ingress keeps delivered records (-status-keep): the status says cancelled, and
		// a second cancel answers the same.
		if st, err := c.Status(ctx, subs[1].ID); err != nil || st.State != client.StateCancelled {
			t.Fatalf("status after cancel: %+v %v", st, err)
		}
		if st, err := c.Cancel(ctx, subs[1].ID); err != nil || st.State != client.StateCancelled {
			t.Fatalf("second cancel: %+v %v", st, err)
		}
		if k, err := a.Key(ctx, "even", "to cancel"); err != nil || k.Depth != 1 {
			t.Fatalf("key after cancel: %+v %v", k, err)
		}
		if err := a.PurgeKey(ctx, "even", "to cancel"); err != nil {
			t.Fatal(err)
		}
	})

	// A purged queue's keys start again from empty: the depth a submission reports (and
	// with it X-RateLimit-Remaining, RateLimit and the eta) counts only what is queued.
	t.Run("depth after a queue purge", func(t *testing.T) {
		a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
		c := sys.client(t)
		paused := true
		if _, err := a.Tune(ctx, "fragile", client.Patch{Paused: &paused}); err != nil {
			t.Fatal(err)
		}
		defer a.Reset(ctx, "fragile")
		waitQueue(ctx, t, a, "fragile", func(q *client.Queue) bool { return q.Paused })
		key := []client.Entry{{Key: "k", Value: "purged"}}
		for i := range 3 {
			if _, err := c.Submit(ctx, "fragile", key, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.PurgeQueue(ctx, "fragile"); err != nil {
			t.Fatal(err)
		}
		if k, err := a.Key(ctx, "fragile", "purged"); err != nil || k.Depth != 0 {
			t.Fatalf("after the purge: %+v %v", k, err)
		}
		sub, err := c.Submit(ctx, "fragile", key, "after", client.WithDepth())
		if err != nil {
			t.Fatal(err)
		}
		if sub.Depth != 1 || sub.RateLimit.Remaining != sub.Capacity-1 {
			t.Fatalf("the first submission after the purge reports depth %d, remaining %d (capacity %d); want 1 and %d",
				sub.Depth, sub.RateLimit.Remaining, sub.Capacity, sub.Capacity-1)
		}
		// Leave the queue empty for the next subtest (the deferred Reset resumes it).
		if err := a.PurgeQueue(ctx, "fragile"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("dead letters and replay", func(t *testing.T) {
		sys.sink.Answer(func(d sinktest.Delivery) (int, string) {
			if d.Rule == "fragile" {
				return http.StatusUnprocessableEntity, ""
			}
			return http.StatusOK, ""
		})
		defer sys.sink.Answer(nil)
		a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
		c := sys.client(t)
		var ids []string
		for i := range 3 {
			sub, err := c.Submit(ctx, "fragile", []client.Entry{{Key: "k", Value: "f"}}, i)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sub.ID)
		}
		for _, id := range ids {
			waitState(ctx, t, c, id, client.StateDead)
		}
		dead, err := a.Dead(ctx, "fragile")
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 3 || dead[0].ID != ids[0] || dead[0].State != client.StateDead || dead[0].Rule != "fragile" ||
			dead[0].Key != "f" || dead[0].Reason == "" || dead[0].CreatedAt.IsZero() {
			t.Fatalf("dead %+v", dead)
		}
		// Page by page.
		var paged []string
		q := client.DeadQuery{Queue: "fragile", Limit: 2}
		for range 5 {
			p, err := a.DeadPage(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range p.Messages {
				paged = append(paged, m.ID)
			}
			if q.After = p.Next; q.After == "" {
				break
			}
		}
		if strings.Join(paged, ",") != strings.Join(ids, ",") {
			t.Fatalf("pages %v, want %v", paged, ids)
		}
		if _, err := a.DeadPage(ctx, client.DeadQuery{Queue: "no-such-queue"}); !errors.Is(err, client.ErrInvalid) {
			t.Fatalf("dead of an unknown queue: %v", err)
		}

		sys.sink.Answer(nil)
		sub, err := a.Replay(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if sub.ID != ids[0] || sub.State != client.StateQueued || sub.Location != "/v1/messages/"+ids[0] {
			t.Fatalf("replay %+v", sub)
		}
		waitState(ctx, t, c, ids[0], client.StateDelivered)
		if _, err := a.Replay(ctx, "0193a1b2-0000-7000-8000-000000000000"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("replay of an unknown id: %v", err)
		}
		// The other two at once.
		rep, err := a.ReplayAll(ctx, "fragile", 0)
		if err != nil || rep.Replayed != 2 || rep.Kept != 0 || rep.Failed != 0 {
			t.Fatalf("ReplayAll: %+v %v", rep, err)
		}
		waitState(ctx, t, c, ids[1], client.StateDelivered)
		waitState(ctx, t, c, ids[2], client.StateDelivered)
		if _, err := a.ReplayAll(ctx, "", 0); err == nil {
			t.Fatal("ReplayAll without a queue")
		}
	})
}

// waitState polls Status until the message is in state want (or final in another state).
func waitState(ctx context.Context, t *testing.T, c *client.Client, id, want string) *client.MessageStatus {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.Status(ctx, id)
		if err != nil {
			t.Fatalf("status of %s: %v", id, err)
		}
		if st.State == want {
			return st
		}
		if st.Final() {
			t.Fatalf("message %s ended %s, want %s: %+v", id, st.State, want, st)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("message %s still %s: %v", id, st.State, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitQueue polls a queue until ok holds for it.
func waitQueue(ctx context.Context, t *testing.T, a *client.Admin, name string, ok func(*client.Queue) bool) *client.Queue {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := a.Queue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if ok(q) {
			return q
		}
		select {
		case <-ctx.Done():
			t.Fatalf("queue %s: %s", name, fmt.Sprintf("%+v", q))
		case <-tick.C:
		}
	}
}

// burst is one burst-beyond-capacity run against a rule of domain (queue rule of the same
// name, keyed by "k", overflow reject).
type burst struct {
	domain, key    string
	total, workers int
	capacity       int
	rate           float64 // outflow per second
}

func (b burst) run(ctx context.Context, t *testing.T, sys *system) {
	c := sys.client(t)
	key := []client.Entry{{Key: "k", Value: b.key}}
	subs := make([]*client.Submission, b.total)
	errs := make([]error, b.total)
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range b.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.total {
					return
				}
				subs[i], errs[i] = c.Submit(ctx, b.domain, key, map[string]any{"n": i})
			}
		})
	}
	wg.Wait()
	admitted := time.Since(start)
	ids := map[string]int{}
	idemKeys := map[string]bool{}
	attempts, maxAttempts := 0, 0
	for i := range b.total {
		if errs[i] != nil {
			t.Fatalf("submission %d: %v", i, errs[i])
		}
		s := subs[i]
		if s.State != client.StateQueued || s.Duplicate || s.ID == "" || s.Capacity != int64(b.capacity) {
			t.Fatalf("submission %d: %+v", i, s)
		}
		if j, dup := ids[s.ID]; dup {
			t.Fatalf("submissions %d and %d got the same id %s", j, i, s.ID)
		}
		ids[s.ID] = i
		idemKeys[s.IdempotencyKey] = true
		attempts += s.Attempts
		maxAttempts = max(maxAttempts, s.Attempts)
	}
	if len(idemKeys) != b.total {
		t.Fatalf("%d idempotency keys for %d submissions", len(idemKeys), b.total)
	}
	if attempts == b.total {
		t.Fatal("no submission was retried: the burst never filled the queue")
	}

	var acc []sinktest.Delivery
	deadline := time.Now().Add(30 * time.Second)
	for len(acc) < b.total && time.Now().Before(deadline) {
		acc = acc[:0]
		for _, d := range sys.sink.WaitAccepted(1, time.Second) {
			if d.Rule == b.domain {
				acc = append(acc, d)
			}
		}
		if len(acc) < b.total {
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	delivered := time.Since(start)
	if len(acc) != b.total {
		t.Fatalf("the sink accepted %d of %d", len(acc), b.total)
	}
	// Exactly once: every admitted id reaches the sink once (the sink's Idempotency-Key is
	// the message id), and nothing else does.
	seen := map[string]bool{}
	for _, d := range acc {
		if seen[d.ID] {
			t.Fatalf("message %s delivered twice", d.ID)
		}
		seen[d.ID] = true
		if _, ok := ids[d.ID]; !ok {
			t.Fatalf("the sink got %s, which no submission returned", d.ID)
		}
	}

	// The outflow. The first `capacity` fit at once; each of the others needed a place
	// freed by a delivery, one per 1/rate: that is the floor. The ceiling: Retry-After is
	// whole seconds (≥ 1), so a producer that honours it refills the queue at most once a
	// second; it gets min(capacity, rate·1s) places a second, not rate, when the queue
	// drains in less than a second. Twice that model plus two seconds is "not absurdly
	// longer"; a client that ignored Retry-After, or retried into a queue that never
	// drained, would be far outside both.
	perSecond := min(float64(b.capacity), b.rate)
	floor := seconds(float64(b.total-b.capacity) / b.rate)
	model := seconds(float64(b.total-b.capacity) / perSecond)
	if admitted < floor-250*time.Millisecond {
		t.Errorf("all %d admitted after %v, faster than the outflow allows (≥ %v)", b.total, admitted, floor)
	}
	if spread := acc[b.total-1].At.Sub(acc[0].At); spread < seconds(float64(b.total-1)/b.rate*0.9) {
		t.Errorf("the sink received %d messages within %v: faster than %v/s", b.total, spread, b.rate)
	}
	if admitted > 2*model+2*time.Second {
		t.Errorf("all admitted only after %v; the outflow and whole-second Retry-After need about %v", admitted, model)
	}
	t.Logf("burst of %d into capacity %d at %v/s from %d goroutines: all admitted after %v (floor %v, model %v), all delivered after %v; "+
		"%d requests (%d answered 429), at most %d attempts for one message; sink spread %v",
		b.total, b.capacity, b.rate, b.workers, admitted.Round(time.Millisecond), floor, model, delivered.Round(time.Millisecond),
		attempts, attempts-b.total, maxAttempts, acc[b.total-1].At.Sub(acc[0].At).Round(time.Millisecond))

	// Status follows a message to the sink.
	st := waitState(ctx, t, c, subs[b.total-1].ID, client.StateDelivered)
	if st.Rule != b.domain || st.Domain != b.domain || st.Key != b.key || st.Attempts != 1 {
		t.Fatalf("status %+v", st)
	}
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
