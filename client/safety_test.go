package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// A call that is not idempotent (a check counts hits, a replay enqueues, a purge deletes)
// is never repeated after an answer a proxy may have sent after passing it on: 502, 504,
// or a 503 that is not the ingress's own problem. The ingress's own 503 is retried.
func TestNotIdempotentNeverRetriedAfterProxyErrors(t *testing.T) {
	t.Parallel()
	calls := map[string]func(c *client.Client) error{
		"Check": func(c *client.Client) error {
			_, err := c.Check(context.Background(), "auth", [][]client.Entry{{{Key: "user", Value: "u"}}}, 1)
			return err
		},
		"Replay": func(c *client.Client) error { _, err := c.Admin().Replay(context.Background(), "id-1"); return err },
		"ReplayAll": func(c *client.Client) error {
			_, err := c.Admin().ReplayAll(context.Background(), "orders", 0)
			return err
		},
		"PurgeQueue": func(c *client.Client) error { return c.Admin().PurgeQueue(context.Background(), "orders") },
		"PurgeKey":   func(c *client.Client) error { return c.Admin().PurgeKey(context.Background(), "orders", "m-1") },
		"TuneIfMatch": func(c *client.Client) error {
			paused := true
			_, err := c.Admin().Tune(context.Background(), "orders", client.Patch{Paused: &paused, IfMatch: "3"})
			return err
		},
	}
	proxy := []answer{
		{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<html>bad gateway</html>"},
		{status: 504, header: map[string]string{"Content-Type": "text/html"}, body: "<html>gateway timeout</html>"},
		{status: 503, header: map[string]string{"Content-Type": "text/html", "Retry-After": "1"}, body: "<html>upstream reset</html>"},
	}
	for name, fn := range calls {
		for _, a := range proxy {
			t.Run(fmt.Sprintf("%s/%d", name, a.status), func(t *testing.T) {
				t.Parallel()
				s := newScript(t, a, answer{status: 200, body: `{}`})
				c, clk := newClient(t, s.URL)
				if err := fn(c); !errors.Is(err, client.ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", err)
				}
				if n := len(s.requests()); n != 1 || len(clk.Sleeps()) != 0 {
					t.Fatalf("%d requests, sleeps %v: a request that may have been done was repeated", n, clk.Sleeps())
				}
			})
		}
		t.Run(name+"/sluice-503", func(t *testing.T) {
			t.Parallel()
			s := newScript(t, answer{status: 503, header: map[string]string{"Retry-After": "1"},
				body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503}`},
				answer{status: 418, body: `{"type":"about:blank","title":"teapot","status":418}`})
			c, clk := newClient(t, s.URL)
			fn(c) // the second answer ends it; what matters is that there was one
			if n := len(s.requests()); n != 2 || len(clk.Sleeps()) != 1 {
				t.Fatalf("%d requests, sleeps %v: the ingress's own 503 (nothing done) should be retried once", n, clk.Sleeps())
			}
		})
	}
}

// Idempotent calls still ride out a proxy's 502 while an ingress restarts.
func TestIdempotentRetriedAfterBadGateway(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<html>bad gateway</html>"},
		answer{status: 200, body: `{"queues":[{"name":"orders","capacity":10}]}`})
	c, clk := newClient(t, s.URL)
	qs, err := c.Admin().Queues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].Name != "orders" {
		t.Fatalf("%v %+v", err, qs)
	}
	if len(s.requests()) != 2 || len(clk.Sleeps()) != 1 {
		t.Fatalf("%d requests, sleeps %v", len(s.requests()), clk.Sleeps())
	}
}

// The sleeps of one call are bounded in total: a Submit refused with "retry after 60 s"
// again and again gives up once the next wait would pass DefaultMaxRetryWait (2 min),
// instead of sleeping nine minutes under context.Background().
func TestRetryWaitBounded(t *testing.T) {
	t.Parallel()
	h := map[string]string{"Retry-After": "60", "X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0"}
	s := newScript(t, answer{status: 429, header: h, body: overBody})
	c, clk := newClient(t, s.URL)
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	if !client.IsOverLimit(err) {
		t.Fatal(err)
	}
	var total time.Duration
	for _, d := range clk.Sleeps() {
		total += d
	}
	// Each wait is 60 s plus at most the jitter ceiling; the first two fit in 2 min only if
	// the jitter is small, so one or two sleeps, and never more than the bound.
	if total > client.DefaultMaxRetryWait || len(clk.Sleeps()) == 0 || len(clk.Sleeps()) > 2 {
		t.Fatalf("slept %v in all (%v), bound %v", total, clk.Sleeps(), client.DefaultMaxRetryWait)
	}

	c, clk = newClient(t, s.URL, client.WithMaxRetryWait(0))
	if _, err := c.Submit(context.Background(), "orders", orders, 1); !client.IsOverLimit(err) || len(clk.Sleeps()) != 0 {
		t.Fatalf("WithMaxRetryWait(0): %v, sleeps %v", err, clk.Sleeps())
	}
}

// A failed Submit says which idempotency key it used, so the caller can resubmit safely:
// the generated one, or the one given.
func TestSubmitErrorCarriesIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 500, body: `{"type":"https://sluice.dev/problems#internal","title":"Internal error","status":500}`})
	c, _ := newClient(t, s.URL)
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	var se *client.SubmitError
	if !errors.As(err, &se) || se.IdempotencyKey == "" || client.IdempotencyKeyOf(err) != se.IdempotencyKey {
		t.Fatalf("%#v", err)
	}
	if sent := s.requests()[0].Header.Get("Idempotency-Key"); sent != se.IdempotencyKey {
		t.Fatalf("sent %q, error says %q", sent, se.IdempotencyKey)
	}
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Status != 500 {
		t.Fatalf("the cause is not reachable: %v", err)
	}
	_, err = c.Submit(context.Background(), "orders", orders, 1, client.WithIdempotencyKey("order-7"))
	if client.IdempotencyKeyOf(err) != "order-7" {
		t.Fatalf("%v", err)
	}
}

// Arguments refused before anything is sent match ErrInvalid, as the server's 400 does.
func TestLocalValidationIsErrInvalid(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, body: `{}`})
	c, _ := newClient(t, s.URL)
	ctx := context.Background()
	a := c.Admin()
	neg := -1
	for name, err := range map[string]error{
		"Queue":      func() error { _, err := a.Queue(ctx, ""); return err }(),
		"Tune":       func() error { _, err := a.Tune(ctx, "q", client.Patch{}); return err }(),
		"Replay":     func() error { _, err := a.Replay(ctx, ""); return err }(),
		"PurgeQueue": a.PurgeQueue(ctx, ""),
		"DeadPage":   func() error { _, err := a.DeadPage(ctx, client.DeadQuery{Limit: -1}); return err }(),
		"Status":     func() error { _, err := c.Status(ctx, ""); return err }(),
		"Check":      func() error { _, err := c.Check(ctx, "d", nil, -1); return err }(),
		"CheckDescriptors": func() error {
			_, err := c.CheckDescriptors(ctx, "d", []client.CheckDescriptor{{HitsAddend: &neg}}, 0)
			return err
		}(),
		"Submit": func() error { _, err := c.Submit(ctx, "d", nil, []byte("{oops")); return err }(),
	} {
		if !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: %v does not match ErrInvalid", name, err)
		}
	}
	if len(s.requests()) != 0 {
		t.Fatalf("%d requests sent", len(s.requests()))
	}
}

func TestConflictSentinels(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 412, body: `{"type":"https://sluice.dev/problems#invalid-request","title":"Precondition Failed","status":412,"detail":"revision 4, not 3"}`})
	c, clk := newClient(t, s.URL)
	paused := true
	_, err := c.Admin().Tune(context.Background(), "orders", client.Patch{Paused: &paused, IfMatch: "3"})
	if !errors.Is(err, client.ErrPreconditionFailed) || errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrConflict) {
		t.Fatalf("%v", err)
	}
	if got := s.requests()[0].Header.Get("If-Match"); got != `"3"` {
		t.Fatalf("If-Match %q", got)
	}
	if len(clk.Sleeps()) != 0 {
		t.Fatal("a 412 was retried")
	}
	s = newScript(t, answer{status: 409, body: `{"type":"https://sluice.dev/problems#not-cancellable","title":"Conflict","status":409}`})
	c, _ = newClient(t, s.URL)
	_, err = c.Cancel(context.Background(), "id")
	if !errors.Is(err, client.ErrConflict) || !errors.Is(err, client.ErrNotCancellable) || errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("%v", err)
	}
}

// CheckDescriptors sends envoy's per-descriptor fields as the ingress reads them.
func TestCheckDescriptorsBody(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, body: `{"overall_code":"OK","statuses":[{"code":"OK","limit_remaining":4}]}`})
	c, _ := newClient(t, s.URL)
	zero := 0
	_, err := c.CheckDescriptors(context.Background(), "auth", []client.CheckDescriptor{
		{Entries: []client.Entry{{Key: "user", Value: "u"}}, HitsAddend: &zero, Limit: &client.LimitOverride{RequestsPerUnit: 5, Unit: "MINUTE"}},
	}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"domain":"auth","descriptors":[{"entries":[{"key":"user","value":"u"}],"hits_addend":0,"limit":{"requests_per_unit":5,"unit":"MINUTE"}}],"hits_addend":3}`
	if got := string(s.requests()[0].Body); got != want {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
}

// SubmitBatch's rounds are bounded by the same total wait: items refused "retry after a
// minute" round after round come back as over limit once the next wait would pass 2 min.
func TestBatchRetryWaitBounded(t *testing.T) {
	t.Parallel()
	item := `{"status":429,"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","detail":"full","retry_after":60}`
	s := newScript(t, answer{status: 200, body: `{"items":[` + item + `]}`})
	c, clk := newClient(t, s.URL)
	res, err := c.SubmitBatch(context.Background(), []client.BatchItem{{Domain: "orders", Descriptor: orders, Payload: 1}})
	if err != nil || len(res) != 1 || !client.IsOverLimit(res[0].Err) {
		t.Fatalf("%v %+v", err, res)
	}
	var total time.Duration
	for _, d := range clk.Sleeps() {
		total += d
	}
	if total > client.DefaultMaxRetryWait || len(clk.Sleeps()) == 0 {
		t.Fatalf("slept %v in all (%v), bound %v", total, clk.Sleeps(), client.DefaultMaxRetryWait)
	}
}

// A batch whose every request is cut off after it was read may have been stored: the
// error carries every item's key, and every result has an Err with its key (never a nil
// Submission with a nil Err).
func TestBatchWholeFailureKeepsKeys(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{fn: hangUp})
	c, _ := newClient(t, s.URL, client.WithMaxAttempts(3))
	items := []client.BatchItem{
		{Domain: "orders", Descriptor: orders, Payload: 1},
		{Domain: "orders", Descriptor: orders, Payload: 2, IdempotencyKey: "order-2"},
	}
	res, err := c.SubmitBatch(context.Background(), items)
	var be *client.BatchError
	if !errors.As(err, &be) || len(be.IdempotencyKeys) != 2 || be.IdempotencyKeys[1] != "order-2" || be.IdempotencyKeys[0] == "" {
		t.Fatalf("%#v", err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Submission != nil || r.Err == nil {
			t.Fatalf("item %d: %+v", i, r)
		}
		if k := client.IdempotencyKeyOf(r.Err); k != be.IdempotencyKeys[i] {
			t.Fatalf("item %d: key %q, batch error says %q", i, k, be.IdempotencyKeys[i])
		}
	}
	var sentBatch []map[string]any
	if err := json.Unmarshal(s.requests()[0].Body, &sentBatch); err != nil || sentBatch[0]["idempotency_key"] != be.IdempotencyKeys[0] {
		t.Fatalf("sent %s (%v), error says %q", s.requests()[0].Body, err, be.IdempotencyKeys[0])
	}
}

// A TTL or delay that has gone negative (deadline.Sub(now)) must not be dropped: it would
// mean "never expires" or "at once". It is refused before anything is sent.
func TestSubmitRefusesNonPositiveTimes(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, header: queuedHeaders, body: queuedBody})
	c, clk := newClient(t, s.URL)
	ctx := context.Background()
	for name, opt := range map[string]client.SubmitOption{
		"WithTTL(-1s)":        client.WithTTL(-time.Second),
		"WithTTL(0)":          client.WithTTL(0),
		"WithDelay(-1s)":      client.WithDelay(-time.Second),
		"WithExpiresAt(past)": client.WithExpiresAt(clk.Now().Add(-time.Second)),
		"WithExpiresAt(now)":  client.WithExpiresAt(clk.Now()),
	} {
		if _, err := c.Submit(ctx, "orders", orders, 1, opt); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	// A zero delay means now; a positive TTL and a future expiry are sent.
	if _, err := c.Submit(ctx, "orders", orders, 1, client.WithDelay(0), client.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if b := decodeBody(t, s.requests()[0].Body); b["ttl"] != "1m0s" || b["delay"] != nil {
		t.Fatalf("body %v", b)
	}
	if _, err := c.Submit(ctx, "orders", orders, 1, client.WithExpiresAt(clk.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
}

// After a 503 the message may have been stored, and only a repeat within JetStream's
// 2-minute duplicate window is recognised as one: Submit's own retries stop short of it
// (100 s after the first attempt) and say so, with the key, instead of sleeping on to
// DefaultMaxRetryWait.
func TestSubmit503RetriesStayInDuplicateWindow(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 503, header: map[string]string{"Retry-After": "30"},
		body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503}`})
	c, clk := newClient(t, s.URL)
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	var total time.Duration
	for _, d := range clk.Sleeps() {
		total += d
	}
	if total > 100*time.Second || len(s.requests()) < 2 {
		t.Fatalf("last retry %v after the first attempt (%d requests): past the duplicate window", total, len(s.requests()))
	}
	if client.IdempotencyKeyOf(err) == "" || !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "within 2 minutes") {
		t.Fatalf("%v", err)
	}
}

// A down ingress (connection refused) is "unavailable" once the retries are used up: the
// error matches ErrUnavailable, keeps the dial error, and says how many attempts were made.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202})
	url := s.URL
	s.Close()
	c, _ := newClient(t, url, client.WithMaxAttempts(3))
	_, serr := c.Submit(context.Background(), "orders", orders, 1)
	_, gerr := c.Status(context.Background(), "m-1")
	for name, err := range map[string]error{"Submit": serr, "Status": gerr} {
		if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "after 3 attempts") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A cancel whose answer was lost may have worked: repeating it would answer "no longer
// tracked", indistinguishable from a delivery. It is not repeated after a cut connection
// nor a proxy's 502; it is after the ingress's own 503 (nothing done).
func TestCancelNotRetriedAfterPossiblySent(t *testing.T) {
	t.Parallel()
	gone := answer{status: 404, body: `{"type":"https://sluice.dev/problems#no-longer-tracked","title":"Not Found","status":404}`}
	for name, first := range map[string]answer{
		"cut": {fn: hangUp},
		"502": {status: 502, body: "bad gateway"},
	} {
		s := newScript(t, first, gone)
		c, _ := newClient(t, s.URL)
		_, err := c.Cancel(context.Background(), "m-1")
		if err == nil || errors.Is(err, client.ErrNoLongerTracked) || len(s.requests()) != 1 {
			t.Errorf("%s: %d requests, %v", name, len(s.requests()), err)
		}
	}
	s := newScript(t, answer{status: 503, body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503}`},
		answer{status: 200, body: `{"id":"m-1","state":"queued"}`})
	c, _ := newClient(t, s.URL)
	if st, err := c.Cancel(context.Background(), "m-1"); err != nil || st.State != client.StateQueued || len(s.requests()) != 2 {
		t.Fatalf("after the ingress's 503: %v %+v", err, st)
	}
}

// Tune's If-Match: "*" bare, a quoted or weak tag as given, a bare tag quoted.
func TestTuneIfMatchHeader(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, header: map[string]string{"ETag": `"4"`}, body: `{"name":"orders"}`})
	c, _ := newClient(t, s.URL)
	paused := true
	for i, tc := range []struct{ in, want string }{
		{"*", "*"}, {"3", `"3"`}, {`"3"`, `"3"`}, {`W/"3"`, `"3"`},
	} {
		if _, err := c.Admin().Tune(context.Background(), "orders", client.Patch{Paused: &paused, IfMatch: tc.in}); err != nil {
			t.Fatal(err)
		}
		if got := s.requests()[i].Header.Get("If-Match"); got != tc.want {
			t.Errorf("IfMatch %s: sent %s, want %s", tc.in, got, tc.want)
		}
	}
}

// WithOverLimitRetry(false) makes a 429 come back at once from Status too, and Cancel and
// the admin calls never retry one.
func TestOverLimitRetryOffForEveryCall(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 429, header: overHeaders, body: overBody},
		answer{status: 200, body: `{"id":"m-1","state":"queued","name":"orders"}`})
	c, _ := newClient(t, s.URL, client.WithOverLimitRetry(false))
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Status": func() error { _, err := c.Status(ctx, "m-1"); return err },
		"Cancel": func() error { _, err := c.Cancel(ctx, "m-1"); return err },
		"Queue":  func() error { _, err := c.Admin().Queue(ctx, "orders"); return err },
		"Reset":  func() error { _, err := c.Admin().Reset(ctx, "orders"); return err },
	} {
		s.mu.Lock()
		s.reqs = nil
		s.mu.Unlock()
		if err := call(); !client.IsOverLimit(err) || len(s.requests()) != 1 {
			t.Errorf("%s: %d requests, %v", name, len(s.requests()), err)
		}
	}
}

// SubmitBatch's bounds are the call's: the retries of a failed request and the rounds
// count together against MaxAttempts and MaxRetryWait.
func TestBatchBudgetIsTheCalls(t *testing.T) {
	t.Parallel()
	item := `{"status":429,"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","detail":"full","retry_after":3}`
	unavailable := answer{status: 503, header: map[string]string{"Retry-After": "8"},
		body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503}`}
	refused := answer{status: 200, body: `{"items":[` + item + `]}`}
	items := []client.BatchItem{{Domain: "orders", Descriptor: orders, Payload: 1}}

	s := newScript(t, unavailable, refused)
	c, _ := newClient(t, s.URL, client.WithMaxAttempts(3), client.WithBackoff(time.Millisecond, time.Millisecond))
	res, err := c.SubmitBatch(context.Background(), items)
	if err != nil || !client.IsOverLimit(res[0].Err) || len(s.requests()) != 3 {
		t.Fatalf("%d requests for MaxAttempts 3: %v %+v", len(s.requests()), err, res)
	}

	s = newScript(t, unavailable, refused)
	c, clk := newClient(t, s.URL, client.WithMaxRetryWait(10*time.Second), client.WithBackoff(time.Millisecond, time.Millisecond))
	res, err = c.SubmitBatch(context.Background(), items)
	var total time.Duration
	for _, d := range clk.Sleeps() {
		total += d
	}
	if err != nil || !client.IsOverLimit(res[0].Err) || total > 10*time.Second {
		t.Fatalf("slept %v (%v) for MaxRetryWait 10s: %v %+v", total, clk.Sleeps(), err, res)
	}
}

// A context that ends while SubmitBatch waits to send refused items again is an error,
// not a nil beside results still holding 429s.
func TestBatchContextEndsBetweenRounds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	item := `{"status":429,"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","detail":"full","retry_after":3}`
	s := newScript(t, answer{status: 200, body: `{"items":[` + item + `]}`})
	// The context ends while the client sleeps between rounds.
	c, _ := newClient(t, s.URL, client.WithClock(nil, func(ctx context.Context, _ time.Duration) error {
		cancel()
		return ctx.Err()
	}))
	res, err := c.SubmitBatch(ctx, []client.BatchItem{{Domain: "orders", Descriptor: orders, Payload: 1}})
	if !errors.Is(err, context.Canceled) || len(res) != 1 || !client.IsOverLimit(res[0].Err) {
		t.Fatalf("%v %+v", err, res)
	}
}
