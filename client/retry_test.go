package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

func TestSubmitQueued(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, header: queuedHeaders, body: queuedBody})
	c, clk := newClient(t, s.URL)
	sub, err := c.Submit(context.Background(), "orders", orders, map[string]any{"order_id": 991})
	if err != nil {
		t.Fatal(err)
	}
	want := client.Submission{ID: "0193a1b2-0000-7000-8000-000000000001", State: client.StateQueued, Depth: 3, Capacity: 100,
		ETA: time.Date(2026, 11, 22, 5, 0, 1, 0, time.UTC), Location: "/v1/messages/0193a1b2-0000-7000-8000-000000000001", Attempts: 1}
	if sub.ID != want.ID || sub.State != want.State || sub.Depth != want.Depth || sub.Capacity != want.Capacity ||
		!sub.ETA.Equal(want.ETA) || sub.Location != want.Location || sub.Attempts != 1 || sub.Duplicate {
		t.Fatalf("got %+v", sub)
	}
	if rl := sub.RateLimit; rl.Limit != 100 || rl.Remaining != 97 || rl.Reset != time.Second || rl.PolicyName() != "orders-per-merchant" {
		t.Fatalf("rate limit %+v", rl)
	}
	if len(clk.Sleeps()) != 0 {
		t.Fatalf("slept %v", clk.Sleeps())
	}
	r := s.requests()[0]
	if r.Method != "POST" || r.EscapedPath != "/v1/messages" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%+v", r)
	}
	body := decodeBody(t, r.Body)
	if body["domain"] != "orders" || body["idempotency_key"] != r.Header.Get("Idempotency-Key") || sub.IdempotencyKey != r.Header.Get("Idempotency-Key") {
		t.Fatalf("body %v, header %q", body, r.Header.Get("Idempotency-Key"))
	}
	if d := body["descriptor"].([]any)[0].(map[string]any); d["key"] != "merchant_id" || d["value"] != "m-42" {
		t.Fatalf("descriptor %v", body["descriptor"])
	}
	if r.Header.Get("Authorization") != "" {
		t.Fatal("a public call sent an Authorization header")
	}
}

func TestSubmitParked(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, header: queuedHeaders, body: `{"id":"x","state":"parked","retry_at":"2026-11-23T00:00:00Z"}`})
	c, _ := newClient(t, s.URL)
	sub, err := c.Submit(context.Background(), "messaging", orders, "hi")
	if err != nil {
		t.Fatal(err)
	}
	if sub.State != client.StateParked || !sub.RetryAt.Equal(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)) || !sub.ETA.IsZero() {
		t.Fatalf("%+v", sub)
	}
}

// The heart of the retry policy: a 429 is waited out for its Retry-After and the second
// attempt carries the same idempotency key, in the header and in the body.
func TestSubmit429Then202SameIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newScript(t,
		answer{status: 429, header: overHeaders, body: overBody},
		answer{status: 202, header: queuedHeaders, body: queuedBody})
	c, clk := newClient(t, s.URL)
	sub, err := c.Submit(context.Background(), "orders", orders, json.RawMessage(`{"order_id":991}`))
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if len(reqs) != 2 || sub.Attempts != 2 {
		t.Fatalf("%d requests, %d attempts", len(reqs), sub.Attempts)
	}
	k0, k1 := reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key")
	if k0 == "" || k0 != k1 || sub.IdempotencyKey != k0 {
		t.Fatalf("keys %q %q %q", k0, k1, sub.IdempotencyKey)
	}
	if string(reqs[0].Body) != string(reqs[1].Body) || decodeBody(t, reqs[1].Body)["idempotency_key"] != k0 {
		t.Fatalf("bodies differ: %s / %s", reqs[0].Body, reqs[1].Body)
	}
	if sl := clk.Sleeps(); len(sl) != 1 || sl[0] < 2*time.Second || sl[0] > 2*time.Second+client.DefaultBackoffBase {
		t.Fatalf("sleeps %v, want one of [2s, 2s+base]", sl)
	}
	// Two calls never share a key.
	if _, err := c.Submit(context.Background(), "orders", orders, 1); err != nil {
		t.Fatal(err)
	}
	if k2 := s.requests()[2].Header.Get("Idempotency-Key"); k2 == k0 || len(k2) != 36 || k2[14] != '7' {
		t.Fatalf("second call key %q (want a fresh UUIDv7)", k2)
	}
}

func TestSubmitGivenIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, body: queuedBody})
	c, _ := newClient(t, s.URL)
	sub, err := c.Submit(context.Background(), "orders", orders, 1, client.WithIdempotencyKey("order-991"))
	if err != nil {
		t.Fatal(err)
	}
	if !sub.Duplicate || sub.IdempotencyKey != "order-991" || sub.ID != "0193a1b2-0000-7000-8000-000000000001" {
		t.Fatalf("%+v", sub)
	}
	r := s.requests()[0]
	if r.Header.Get("Idempotency-Key") != "order-991" || decodeBody(t, r.Body)["idempotency_key"] != "order-991" {
		t.Fatalf("%v %s", r.Header, r.Body)
	}
}

// A cut connection after the request went out is exactly the case the idempotency key is
// for: Submit retries it with the same key, and the server's 200 says "already had it".
func TestSubmitRetriesCutConnectionWithSameKey(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{fn: hangUp}, answer{status: 200, header: queuedHeaders, body: queuedBody})
	c, clk := newClient(t, s.URL)
	sub, err := c.Submit(context.Background(), "orders", orders, 1)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0].Header.Get("Idempotency-Key") != reqs[1].Header.Get("Idempotency-Key") || !sub.Duplicate {
		t.Fatalf("%d requests, duplicate %v", len(reqs), sub.Duplicate)
	}
	if sl := clk.Sleeps(); len(sl) != 1 || sl[0] < 0 || sl[0] > client.DefaultBackoffBase {
		t.Fatalf("sleeps %v, want one in [0, base]", sl)
	}
}

func TestSubmitConnectionRefusedIsRetriedThenReported(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202})
	url := s.URL
	s.Close() // nothing listens there any more
	c, clk := newClient(t, url, client.WithMaxAttempts(3))
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	if err == nil || !strings.HasPrefix(err.Error(), "sluice: POST /v1/messages: ") {
		t.Fatalf("err %v", err)
	}
	if len(clk.Sleeps()) != 2 {
		t.Fatalf("sleeps %v, want 2 (3 attempts)", clk.Sleeps())
	}
}

func TestNeverRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		body   string
		is     error
	}{
		{400, `{"type":"https://sluice.dev/problems#invalid-request","title":"Invalid request","status":400,"field":"descriptor[0].value","detail":"must be valid UTF-8 of at most 256 bytes"}`, client.ErrInvalid},
		{401, `{"type":"https://sluice.dev/problems#unauthorized","title":"Unauthorized","status":401}`, client.ErrUnauthorized},
		{404, `{"type":"https://sluice.dev/problems#no-matching-rule","title":"No matching rule","status":404}`, client.ErrNoRule},
		{413, `{"type":"https://sluice.dev/problems#payload-too-large","title":"Payload too large","status":413}`, client.ErrTooLarge},
		{415, `{"type":"https://sluice.dev/problems#invalid-request","title":"Unsupported media type","status":415}`, client.ErrInvalid},
		{500, `{"type":"https://sluice.dev/problems#internal","title":"Internal error","status":500}`, nil},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			s := newScript(t, answer{status: tc.status, body: tc.body}, answer{status: 202, body: queuedBody})
			c, clk := newClient(t, s.URL)
			_, err := c.Submit(context.Background(), "orders", orders, 1)
			var pe *client.ProblemError
			if !errors.As(err, &pe) || pe.Status != tc.status || pe.Attempts != 1 {
				t.Fatalf("err %#v", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%v is not %v", err, tc.is)
			}
			if client.IsOverLimit(err) || errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("%v matches the wrong sentinel", err)
			}
			if n := len(s.requests()); n != 1 || len(clk.Sleeps()) != 0 {
				t.Fatalf("%d requests, sleeps %v", n, clk.Sleeps())
			}
		})
	}
}

func TestBadRequestProblem(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 400, body: `{"type":"https://sluice.dev/problems#invalid-request","title":"Invalid request","status":400,"field":"descriptor[0].value","detail":"must be valid UTF-8 of at most 256 bytes"}`})
	c, _ := newClient(t, s.URL)
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	var pe *client.ProblemError
	if !errors.As(err, &pe) {
		t.Fatal(err)
	}
	if pe.Type != client.ProblemInvalidRequest || pe.Field != "descriptor[0].value" || pe.Title != "Invalid request" ||
		pe.Detail != "must be valid UTF-8 of at most 256 bytes" {
		t.Fatalf("%+v", pe)
	}
	if got := err.Error(); got != "sluice: 400 Invalid request: descriptor[0].value: must be valid UTF-8 of at most 256 bytes (idempotency key "+client.IdempotencyKeyOf(err)+")" {
		t.Fatalf("message %q", got)
	}
}

func TestNotProblemJSON(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 403, header: map[string]string{"Content-Type": "text/html"}, body: "<html>denied by the proxy</html>"})
	c, _ := newClient(t, s.URL)
	_, err := c.Status(context.Background(), "x")
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Type != "about:blank" || pe.Title != "Forbidden" || !strings.Contains(pe.Detail, "denied") {
		t.Fatalf("%#v", err)
	}
}

func TestOverLimitNoRetryOption(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 429, header: overHeaders, body: overBody}, answer{status: 202, body: queuedBody})
	for _, c := range []struct {
		name string
		opts []client.Option
		sub  []client.SubmitOption
	}{
		{"client", []client.Option{client.WithOverLimitRetry(false)}, nil},
		{"call", nil, []client.SubmitOption{client.SubmitOverLimitRetry(false)}},
	} {
		s.mu.Lock()
		s.reqs = nil
		s.mu.Unlock()
		cl, clk := newClient(t, s.URL, c.opts...)
		_, err := cl.Submit(context.Background(), "orders", orders, 1, c.sub...)
		if !client.IsOverLimit(err) || !errors.Is(err, client.ErrOverLimit) {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ol *client.OverLimitError
		if !errors.As(err, &ol) {
			t.Fatalf("%s: not an *OverLimitError: %T", c.name, err)
		}
		if ol.RetryAfter != 2*time.Second || ol.Limit != 100 || ol.Remaining != 0 || ol.Reset != time.Second ||
			ol.Policy != "orders-per-merchant" || len(ol.ViolatedPolicies) != 1 || ol.ViolatedPolicies[0] != "orders-per-merchant" {
			t.Fatalf("%s: %+v", c.name, ol)
		}
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Type != client.ProblemQuotaExceeded || pe.Status != 429 {
			t.Fatalf("%s: problem %+v", c.name, pe)
		}
		if n := len(s.requests()); n != 1 || len(clk.Sleeps()) != 0 {
			t.Fatalf("%s: %d requests, sleeps %v", c.name, n, clk.Sleeps())
		}
		if got := err.Error(); got != "sluice: over limit (orders-per-merchant); retry after 2s (idempotency key "+client.IdempotencyKeyOf(err)+")" {
			t.Fatalf("%s: message %q", c.name, got)
		}
	}
}

// A Retry-After beyond MaxRetryAfter ("the daily quota is spent") is returned, not slept.
func TestLongRetryAfterReturnsAtOnce(t *testing.T) {
	t.Parallel()
	h := map[string]string{"Retry-After": "68400", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "68400"}
	s := newScript(t, answer{status: 429, header: h, body: overBody})
	c, clk := newClient(t, s.URL)
	_, err := c.Submit(context.Background(), "messaging", orders, 1)
	var ol *client.OverLimitError
	if !errors.As(err, &ol) || ol.RetryAfter != 19*time.Hour || len(clk.Sleeps()) != 0 || len(s.requests()) != 1 {
		t.Fatalf("err %v, sleeps %v", err, clk.Sleeps())
	}
}

func TestUnavailableRetriedWithRetryAfterThenGivesUp(t *testing.T) {
	t.Parallel()
	unavailable := answer{status: 503, header: map[string]string{"Retry-After": "3"},
		body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503,"retry_after":3}`}
	s := newScript(t, unavailable)
	c, clk := newClient(t, s.URL, client.WithMaxAttempts(4))
	_, err := c.Submit(context.Background(), "orders", orders, 1)
	var pe *client.ProblemError
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &pe) || pe.Attempts != 4 || pe.RetryAfter != 3*time.Second {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(err.Error(), "after 4 attempts") {
		t.Fatalf("message %q", err)
	}
	sl := clk.Sleeps()
	if len(sl) != 3 || len(s.requests()) != 4 {
		t.Fatalf("sleeps %v, %d requests", sl, len(s.requests()))
	}
	for i, d := range sl {
		if d < 3*time.Second {
			t.Fatalf("sleep %d = %v < Retry-After", i, d)
		}
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	date := clk.Now().Add(7 * time.Second).Format(http.TimeFormat)
	s := newScript(t, answer{status: 503, header: map[string]string{"Retry-After": date}, body: `{"type":"https://sluice.dev/problems#unavailable","status":503}`},
		answer{status: 202, body: queuedBody})
	c, err := client.New(s.URL, client.WithClock(clk.Now, clk.Sleep))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), "orders", orders, 1); err != nil {
		t.Fatal(err)
	}
	if sl := clk.Sleeps(); len(sl) != 1 || sl[0] < 7*time.Second || sl[0] > 7*time.Second+client.DefaultBackoffBase {
		t.Fatalf("sleeps %v, want one of [7s, 7s+base]", sl)
	}
}

// Without Retry-After the waits are full jitter: uniform in [0, min(cap, base·2^(n-1))].
func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 503, body: `{"type":"https://sluice.dev/problems#unavailable","status":503}`})
	base, cap := 100*time.Millisecond, 2*time.Second
	var all []time.Duration
	for range 20 {
		c, clk := newClient(t, s.URL, client.WithBackoff(base, cap), client.WithMaxAttempts(12))
		if _, err := c.Submit(context.Background(), "orders", orders, 1); !errors.Is(err, client.ErrUnavailable) {
			t.Fatal(err)
		}
		sl := clk.Sleeps()
		if len(sl) != 11 {
			t.Fatalf("%d sleeps", len(sl))
		}
		for n, d := range sl {
			ceiling := min(cap, base<<n)
			if d < 0 || d > ceiling {
				t.Fatalf("retry %d slept %v, outside [0, %v]", n+1, d, ceiling)
			}
		}
		all = append(all, sl[len(sl)-1])
	}
	// Full jitter, not "equal jitter": capped waits land below cap/2 too.
	low := 0
	for _, d := range all {
		if d < cap/2 {
			low++
		}
	}
	if low == 0 {
		t.Fatalf("no capped wait below cap/2 in %v", all)
	}
}

// The context's deadline bounds the whole call: no sleep that would outlive it.
func TestDeadlineBoundsTheLoop(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 503, body: `{"type":"https://sluice.dev/problems#unavailable","status":503}`})
	c, err := client.New(s.URL, client.WithBackoff(5*time.Millisecond, 20*time.Millisecond), client.WithMaxAttempts(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Submit(ctx, "orders", orders, 1)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v with a 200ms deadline", el)
	}
	if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
	if n := len(s.requests()); n < 2 {
		t.Fatalf("only %d requests: did not retry at all", n)
	}
}

// A Retry-After past the deadline returns the refusal at once instead of sleeping into a
// deadline error.
func TestRetryAfterPastDeadlineReturnsRefusal(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 429, header: overHeaders, body: overBody})
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // Retry-After is 2s
	defer cancel()
	start := time.Now()
	_, err = c.Submit(ctx, "orders", orders, 1)
	if !client.IsOverLimit(err) || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 429, header: overHeaders, body: overBody})
	ctx, cancel := context.WithCancel(context.Background())
	sleep := func(ctx context.Context, d time.Duration) error { cancel(); <-ctx.Done(); return ctx.Err() }
	c, err := client.New(s.URL, client.WithClock(nil, sleep))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, "orders", orders, 1)
	if !errors.Is(err, context.Canceled) || !client.IsOverLimit(err) {
		t.Fatalf("%v: want both the refusal and the cancellation", err)
	}
}

// The payload reaches the server byte-for-byte: no compaction, no HTML escaping.
func TestPayloadBytesPreserved(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, body: queuedBody})
	c, _ := newClient(t, s.URL)
	raw := `{ "note": "<b>&</b>",  "n": 1.50 }`
	for _, p := range []any{json.RawMessage(raw), []byte(raw)} {
		if _, err := c.Submit(context.Background(), "orders", orders, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Submit(context.Background(), "orders", orders, map[string]string{"note": "<b>&</b>"}); err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	for i := range 2 {
		if !strings.Contains(string(reqs[i].Body), `"payload":`+raw+`,`) {
			t.Fatalf("body %s does not hold the payload as given", reqs[i].Body)
		}
	}
	if !strings.Contains(string(reqs[2].Body), `"payload":{"note":"<b>&</b>"},`) {
		t.Fatalf("body %s", reqs[2].Body)
	}
	if _, err := c.Submit(context.Background(), "orders", orders, json.RawMessage(`{oops`)); !errors.Is(err, client.ErrInvalidPayload) {
		t.Fatalf("%v", err)
	}
	if len(s.requests()) != 3 {
		t.Fatal("an invalid payload was sent")
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	s := newScript(t,
		answer{status: 200, body: `{"id":"a/b","domain":"orders","rule":"orders-per-merchant","key":"m-42","state":"dead","attempts":8,"created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:10:00Z","last_error":"sink: 422"}`},
		answer{status: 404, body: `{"type":"https://sluice.dev/problems#not-found","title":"Not Found","status":404}`})
	c, _ := newClient(t, s.URL)
	st, err := c.Status(context.Background(), "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != client.StateDead || !st.Final() || st.Attempts != 8 || st.LastError != "sink: 422" || st.Rule != "orders-per-merchant" ||
		!st.UpdatedAt.Equal(time.Date(2026, 11, 22, 5, 10, 0, 0, time.UTC)) {
		t.Fatalf("%+v", st)
	}
	if p := s.requests()[0].EscapedPath; p != "/v1/messages/a%2Fb" {
		t.Fatalf("path %q", p)
	}
	_, err = c.Status(context.Background(), "nope")
	if !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrNoRule) {
		t.Fatalf("%v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ok := `{"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":5,"unit":"MINUTE","name":"login"},"limit_remaining":4,"duration_until_reset":"60s"}]}`
	over := `{"overall_code":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","current_limit":{"requests_per_unit":5,"unit":"MINUTE"},"limit_remaining":0,"duration_until_reset":12}]}`
	// envoy's own /json endpoint speaks protojson's lowerCamelCase.
	envoy := `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":5,"unit":"SECOND","unitMultiplier":30},"limitRemaining":3,"durationUntilReset":"1.5s"}]}`
	s := newScript(t,
		answer{status: 200, header: map[string]string{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4"}, body: ok},
		answer{status: 429, header: map[string]string{"Retry-After": "12"}, body: over},
		answer{status: 200, body: envoy})
	c, clk := newClient(t, s.URL)
	ctx := context.Background()
	login := [][]client.Entry{{{Key: "auth_type", Value: "login"}}}

	r, err := c.Check(ctx, "auth", login, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Statuses[0]
	if !r.OK() || st.Code != client.CodeOK || st.CurrentLimit == nil || st.CurrentLimit.RequestsPerUnit != 5 || st.CurrentLimit.Unit != "MINUTE" ||
		st.CurrentLimit.Name != "login" || st.CurrentLimit.UnitMultiplier != 1 || st.LimitRemaining != 4 || st.DurationUntilReset != time.Minute || r.RateLimit.Limit != 5 {
		t.Fatalf("%+v %+v", r, st)
	}
	body := decodeBody(t, s.requests()[0].Body)
	if _, has := body["hits_addend"]; has || body["domain"] != "auth" {
		t.Fatalf("body %v", body)
	}
	if e := body["descriptors"].([]any)[0].(map[string]any)["entries"].([]any)[0].(map[string]any); e["key"] != "auth_type" || e["value"] != "login" {
		t.Fatalf("body %v", body)
	}

	r, err = c.Check(ctx, "auth", login, 3)
	if err != nil {
		t.Fatalf("a 429 of /v1/check is a result, not an error: %v", err)
	}
	if r.OK() || r.OverallCode != client.CodeOverLimit || r.Statuses[0].DurationUntilReset != 12*time.Second || len(clk.Sleeps()) != 0 {
		t.Fatalf("%+v, sleeps %v", r, clk.Sleeps())
	}
	if decodeBody(t, s.requests()[1].Body)["hits_addend"] != float64(3) {
		t.Fatal("hits_addend not sent")
	}

	r, err = c.Check(ctx, "auth", login, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Statuses[0]; !r.OK() || st.LimitRemaining != 3 || st.DurationUntilReset != 1500*time.Millisecond || st.CurrentLimit.RequestsPerUnit != 5 || st.CurrentLimit.UnitMultiplier != 30 {
		t.Fatalf("%+v", st)
	}
}

// A check counts hits, so a connection cut after sending is not retried (it may have
// counted); Submit in the same situation is (see TestSubmitRetriesCutConnectionWithSameKey).
func TestCheckDoesNotRetryCutConnection(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{fn: hangUp}, answer{status: 200, body: `{"overall_code":"OK","statuses":[]}`})
	c, _ := newClient(t, s.URL)
	if _, err := c.Check(context.Background(), "auth", [][]client.Entry{{{Key: "a", Value: "b"}}}, 1); err == nil {
		t.Fatal("no error")
	}
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	for _, o := range []client.Option{client.WithMaxAttempts(0), client.WithBackoff(0, time.Second), client.WithBackoff(time.Second, time.Millisecond), client.WithHTTPClient(nil), client.WithMaxRetryAfter(-1)} {
		if _, err := client.New("http://x", o); err == nil {
			t.Error("bad option accepted")
		}
	}
	c, err := client.New("http://example.com/prefix/")
	if err != nil || c.BaseURL() != "http://example.com/prefix" {
		t.Fatalf("%v %v", c, err)
	}
}

func TestBaseURLPrefixAndUserAgent(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 202, body: queuedBody})
	c, _ := newClient(t, s.URL+"/sluice/", client.WithUserAgent("orders-svc/2"))
	if _, err := c.Submit(context.Background(), "orders", orders, 1); err != nil {
		t.Fatal(err)
	}
	r := s.requests()[0]
	if r.EscapedPath != "/sluice/v1/messages" || r.Header.Get("User-Agent") != "orders-svc/2" {
		t.Fatalf("%+v", r)
	}
}
