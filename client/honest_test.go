package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// batchServer answers each batch item by its payload {"n":N,"refuse":R,"ra":S}: 429 with
// retry_after S the first R times the item comes, then 202. It records, per request, the
// items' n in the order sent and the (fake) time it came.
type batchServer struct {
	*httptest.Server
	clk    *fakeClock
	mu     sync.Mutex
	seen   map[int]int
	rounds []batchRound
}

type batchRound struct {
	at time.Duration // since the first request
	ns []int
}

func newBatchServer(t *testing.T) *batchServer {
	bs := &batchServer{seen: map[int]int{}}
	var start time.Time
	bs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var items []struct {
			Payload struct{ N, Refuse, RA int }
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &items); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		bs.mu.Lock()
		defer bs.mu.Unlock()
		now := bs.clk.Now()
		if len(bs.rounds) == 0 {
			start = now
		}
		round := batchRound{at: now.Sub(start)}
		var out []string
		for _, it := range items {
			p := it.Payload
			round.ns = append(round.ns, p.N)
			bs.seen[p.N]++
			if bs.seen[p.N] <= p.Refuse {
				out = append(out, fmt.Sprintf(`{"status":429,"type":"https://sluice.dev/problems#quota-exceeded","title":"Too Many Requests","retry_after":%d}`, p.RA))
			} else {
				out = append(out, fmt.Sprintf(`{"status":202,"id":"id-%d","state":"queued"}`, p.N))
			}
		}
		bs.rounds = append(bs.rounds, round)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"items":[%s]}`, strings.Join(out, ","))
	}))
	t.Cleanup(bs.Close)
	return bs
}

// Each refused item of a batch goes again no sooner than its own Retry-After, and never
// before an earlier item of its key: item 1 (key a, 3 s) and item 2 (key b, 1 s) go back
// at +1 s (item 2 alone) and +3 s (item 1); item 3 (key a again, 1 s) waits for item 1
// and follows it.
func TestBatchResendsKeepRetryAfterAndKeyOrder(t *testing.T) {
	t.Parallel()
	bs := newBatchServer(t)
	c, clk := newClient(t, bs.URL, client.WithBackoff(time.Millisecond, time.Millisecond))
	bs.clk = clk
	key := func(k string) []client.Entry { return []client.Entry{{Key: "merchant_id", Value: k}} }
	items := []client.BatchItem{
		{Domain: "orders", Descriptor: key("a"), Payload: map[string]int{"n": 1, "refuse": 1, "ra": 3}},
		{Domain: "orders", Descriptor: key("b"), Payload: map[string]int{"n": 2, "refuse": 1, "ra": 1}},
		{Domain: "orders", Descriptor: key("a"), Payload: map[string]int{"n": 3, "refuse": 1, "ra": 1}},
		{Domain: "orders", Descriptor: key("c"), Payload: map[string]int{"n": 4}},
	}
	res, err := c.SubmitBatch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Submission.ID != fmt.Sprintf("id-%d", i+1) {
			t.Fatalf("item %d: %+v", i+1, r)
		}
	}
	want := []batchRound{{0, []int{1, 2, 3, 4}}, {time.Second, []int{2}}, {3 * time.Second, []int{1, 3}}}
	if fmt.Sprint(bs.rounds) != fmt.Sprint(want) {
		t.Fatalf("rounds (at, items) %v, want %v", bs.rounds, want)
	}
	if res[0].Submission.Attempts != 2 || res[3].Submission.Attempts != 1 {
		t.Fatalf("attempts per item: %d, %d", res[0].Submission.Attempts, res[3].Submission.Attempts)
	}
}

// A connection reset once a non-idempotent call was sent, a cut-off answer, a proxy's 502
// and a Submit's 2xx that cannot be read all match ErrOutcomeUnknown (with the key of a
// Submit), after one attempt for the calls that are not repeated; a refused connection
// (nothing sent) does not.
func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	cutOff := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		io.WriteString(w, `{"id":`)
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}
	badGateway := answer{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<html>bad gateway</html>"}
	ctx := context.Background()
	calls := []struct {
		name string
		ans  answer
		run  func(c *client.Client) error
	}{
		{"Cancel reset", answer{fn: hangUp}, func(c *client.Client) error { _, err := c.Cancel(ctx, "id-1"); return err }},
		{"Check cut off", answer{fn: cutOff}, func(c *client.Client) error {
			_, err := c.Check(ctx, "api", [][]client.Entry{orders}, 1)
			return err
		}},
		{"PurgeQueue 502", badGateway, func(c *client.Client) error { return c.Admin().PurgeQueue(ctx, "orders") }},
		{"Replay reset", answer{fn: hangUp}, func(c *client.Client) error { _, err := c.Admin().Replay(ctx, "id-1"); return err }},
		{"Tune If-Match reset", answer{fn: hangUp}, func(c *client.Client) error {
			p := true
			_, err := c.Admin().Tune(ctx, "orders", client.Patch{Paused: &p, IfMatch: "3"})
			return err
		}},
	}
	for _, tc := range calls {
		s := newScript(t, tc.ans)
		c, _ := newClient(t, s.URL)
		err := tc.run(c)
		var ou *client.OutcomeUnknownError
		if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &ou) || ou.Attempts != 1 || len(s.requests()) != 1 {
			t.Errorf("%s: %v (%d requests), want ErrOutcomeUnknown after 1", tc.name, err, len(s.requests()))
		}
	}

	// Submit: retried (the key makes it safe); when the retries run out, the outcome is
	// unknown and the error carries the key, in its text too.
	s := newScript(t, answer{fn: hangUp})
	c, _ := newClient(t, s.URL, client.WithMaxAttempts(3))
	_, err := c.Submit(ctx, "orders", orders, 1, client.WithIdempotencyKey("order-77"))
	var ou *client.OutcomeUnknownError
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &ou) || ou.IdempotencyKey != "order-77" || ou.Attempts != 3 ||
		client.IdempotencyKeyOf(err) != "order-77" || !strings.Contains(err.Error(), "order-77") || len(s.requests()) != 3 {
		t.Fatalf("Submit reset thrice: %v", err)
	}
	// A 202 whose body cannot be read: stored, but as what? Unknown, with the key.
	s = newScript(t, answer{status: 202, body: `{"id":`})
	c, _ = newClient(t, s.URL)
	if _, err := c.Submit(ctx, "orders", orders, 1, client.WithIdempotencyKey("order-78")); !errors.Is(err, client.ErrOutcomeUnknown) ||
		client.IdempotencyKeyOf(err) != "order-78" || !strings.Contains(err.Error(), "order-78") {
		t.Fatalf("Submit with an unreadable 202: %v", err)
	}
	// The ingress's own 503 says nothing was done: not unknown.
	s = newScript(t, answer{status: 503, body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503}`})
	c, _ = newClient(t, s.URL, client.WithMaxAttempts(2))
	if _, err := c.Cancel(ctx, "id-1"); !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Cancel answered the ingress's 503: %v", err)
	}
	// Nothing sent: a refused connection is ErrUnavailable, never unknown.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c, _ = newClient(t, "http://"+addr, client.WithMaxAttempts(2))
	if err := c.Admin().PurgeQueue(ctx, "orders"); !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("PurgeQueue, connection refused: %v", err)
	}
}

// A SubmitBatch whose request is cut off after its retries is a *BatchError that names its
// keys in its text and matches ErrOutcomeUnknown.
func TestBatchErrorNamesKeys(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{fn: hangUp})
	c, _ := newClient(t, s.URL, client.WithMaxAttempts(2))
	_, err := c.SubmitBatch(context.Background(), []client.BatchItem{
		{Domain: "orders", Descriptor: orders, Payload: 1, IdempotencyKey: "k-1"},
		{Domain: "orders", Descriptor: orders, Payload: 2, IdempotencyKey: "k-2"},
	})
	var be *client.BatchError
	if !errors.As(err, &be) || !errors.Is(err, client.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "k-1, k-2") {
		t.Fatalf("%v", err)
	}
}

// 403 has its own sentinel, and still matches ErrUnauthorized; 401 is not ErrForbidden.
func TestForbiddenSentinel(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 403, body: `{"type":"https://sluice.dev/problems#forbidden","title":"Forbidden","status":403}`})
	c, _ := newClient(t, s.URL, client.WithAdminToken("read"))
	if _, err := c.Admin().Queues(context.Background()); !errors.Is(err, client.ErrForbidden) || !errors.Is(err, client.ErrUnauthorized) || len(s.requests()) != 1 {
		t.Fatalf("403: %v", err)
	}
	s = newScript(t, answer{status: 401, body: `{"type":"https://sluice.dev/problems#unauthorized","title":"Unauthorized","status":401}`})
	c, _ = newClient(t, s.URL)
	if _, err := c.Admin().Queues(context.Background()); errors.Is(err, client.ErrForbidden) || !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("401: %v", err)
	}
}

// No call follows a redirect: a POST is never turned into a GET that reads as accepted,
// and a token never goes to another port. The 3xx is the answer, once.
func TestRedirectsNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Method+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedBody)
	}))
	t.Cleanup(other.Close)
	for _, code := range []int{302, 307, 308} {
		s := newScript(t, answer{status: code, header: map[string]string{"Location": other.URL + "/v1/admin/queues"}})
		c, _ := newClient(t, s.URL, client.WithAdminToken("adm-token"))
		_, err := c.Admin().Queues(context.Background())
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != code || !strings.Contains(pe.Detail, other.URL) {
			t.Errorf("admin call redirected %d: %v", code, err)
		}
		_, err = c.Submit(context.Background(), "orders", orders, 1)
		if err == nil || !errors.As(err, &pe) || pe.Status != code || client.IdempotencyKeyOf(err) == "" {
			t.Errorf("Submit redirected %d: %v", code, err)
		}
		if n := len(s.requests()); n != 2 {
			t.Errorf("redirect %d: %d requests, want 2", code, n)
		}
	}
	// A client of the caller's own, which would follow them, does not either.
	s := newScript(t, answer{status: 307, header: map[string]string{"Location": other.URL + "/v1/admin/queues"}})
	c, _ := newClient(t, s.URL, client.WithAdminToken("adm-token"), client.WithHTTPClient(&http.Client{}))
	if _, err := c.Admin().Queues(context.Background()); err == nil {
		t.Errorf("WithHTTPClient: redirect followed")
	}
	if len(elsewhere) != 0 {
		t.Fatalf("requests reached the redirect's target: %v", elsewhere)
	}
}

// A query string or a fragment in the base URL is refused, not dropped.
func TestBaseURLQueryRefused(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://h:8080/?tenant=1", "http://h:8080/sluice?", "http://h/#x", "http://u:s3cr3t@h/?a=b"} {
		_, err := client.New(u)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}

// A weak ETag (a compressing proxy's W/"5") is read as revision 5, and sent back as the
// strong "5" that the ingress accepts.
func TestWeakETag(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, header: map[string]string{"ETag": `W/"5"`}, body: `{"name":"orders"}`})
	c, _ := newClient(t, s.URL)
	q, err := c.Admin().Queue(context.Background(), "orders")
	if err != nil || q.ETag != "5" {
		t.Fatalf("ETag %q %v", q.ETag, err)
	}
	p := true
	if _, err := c.Admin().Tune(context.Background(), "orders", client.Patch{Paused: &p, IfMatch: q.ETag}); err != nil {
		t.Fatal(err)
	}
	if got := s.requests()[1].Header.Get("If-Match"); got != `"5"` {
		t.Fatalf("If-Match %s", got)
	}
}

// A struct holding a Client, by pointer or by value, exported or not, prints no token
// and no password with any verb.
func TestPrintedHolderHidesTokens(t *testing.T) {
	t.Parallel()
	c, err := client.New("http://user:pw-s3cr3t@example.com", client.WithAdminToken("adm-s3cr3t"), client.WithSubmitToken("sub-s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		c   client.Client
		p   *client.Client
		C   client.Client
		P   *client.Client
		Adm *client.Admin
	}
	h := holder{c: *c, p: c, C: *c, P: c, Adm: c.Admin()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{h, &h, []holder{h}, map[string]holder{"x": h}} {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, "s3cr3t") {
				t.Errorf("%s printed %s", verb, out)
			}
		}
	}
}

// A call is bounded by MaxCallTime even with a context that never ends: a server that
// never answers a request with no http.Client timeout ends the call at the bound.
func TestMaxCallTimeBoundsACall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newScript(t, answer{fn: func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}})
	t.Cleanup(func() { close(release) })
	c, _ := newClient(t, s.URL, client.WithHTTPClient(&http.Client{}), client.WithMaxCallTime(200*time.Millisecond))
	start := time.Now()
	_, err := c.Status(context.Background(), "id-1")
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el > 5*time.Second {
		t.Fatalf("after %v: %v", el, err)
	}
	if client.DefaultMaxCallTime != 3*time.Minute {
		t.Fatalf("DefaultMaxCallTime %v", client.DefaultMaxCallTime)
	}
}

// The ingress's own answers after it acted: a cancel whose delete timed out (500
// #outcome-unknown) is ErrOutcomeUnknown; a stored, not applied Tune (500
// #stored-not-applied) is ErrPartiallyApplied with the stored ETag; a replay stopped part
// way returns its counts and Next with ErrPartiallyApplied; none is retried.
func TestServerSaysItActed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newScript(t, answer{status: 500, body: `{"type":"https://sluice.dev/problems#outcome-unknown","title":"Outcome unknown","status":500}`})
	c, _ := newClient(t, s.URL)
	if _, err := c.Cancel(ctx, "id-1"); !errors.Is(err, client.ErrOutcomeUnknown) || len(s.requests()) != 1 {
		t.Fatalf("Cancel: %v", err)
	}
	s = newScript(t, answer{status: 500, header: map[string]string{"ETag": `"12"`},
		body: `{"type":"https://sluice.dev/problems#stored-not-applied","title":"Stored, not applied","status":500,"done":{"etag":"\"12\""}}`})
	c, _ = newClient(t, s.URL)
	capacity := int64(9)
	_, err := c.Admin().Tune(ctx, "orders", client.Patch{Capacity: &capacity})
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrPartiallyApplied) || !errors.As(err, &pe) || pe.ETag != "12" || pe.Done["etag"] != `"12"` ||
		errors.Is(err, client.ErrUnavailable) || len(s.requests()) != 1 {
		t.Fatalf("Tune: %v", err)
	}
	s = newScript(t,
		answer{status: 200, body: `{"queue":"orders","replayed":2,"kept":0,"failed":0,"next":"/v1/admin/dead/replay?after=41&limit=2&queue=orders"}`},
		answer{status: 500, body: `{"type":"https://sluice.dev/problems#partially-applied","title":"Partially applied","status":500,` +
			`"done":{"queue":"orders","replayed":1,"kept":1,"failed":0},"next":"/v1/admin/dead/replay?after=57&limit=3&queue=orders"}`})
	c, _ = newClient(t, s.URL)
	r, err := c.Admin().ReplayAll(ctx, "orders", 2)
	if err != nil || r.Replayed != 2 || r.Next == nil || *r.Next != (client.DeadQuery{Queue: "orders", Limit: 2, After: "41"}) {
		t.Fatalf("ReplayAll: %+v %v", r, err)
	}
	r, err = c.Admin().ReplayDead(ctx, client.DeadQuery{Queue: "orders", Limit: 5, After: "41"})
	if !errors.Is(err, client.ErrPartiallyApplied) || r == nil || r.Replayed != 1 || r.Kept != 1 || r.Next == nil || r.Next.After != "57" || r.Next.Limit != 3 {
		t.Fatalf("ReplayDead: %+v %v", r, err)
	}
	if got := s.requests()[1].RequestURI; got != "/v1/admin/dead/replay?after=41&limit=5&queue=orders" || len(s.requests()) != 2 {
		t.Fatalf("ReplayDead sent %s (%d requests)", got, len(s.requests()))
	}
}
