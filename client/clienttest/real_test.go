package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/client/clienttest"
)

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// do sends a raw request to the fake and returns the answer with its body read.
func do(t *testing.T, method, url string, h http.Header, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

var jsonCT = http.Header{"Content-Type": {"application/json"}}

// The doc's snippet gets FullKey's 429 at once; a no-sleep clock makes the default
// retries instant too.
func TestNoWaiting(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	full := []client.Entry{{Key: "merchant_id", Value: clienttest.FullKey}}
	start := time.Now()
	c, _ := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken), client.WithOverLimitRetry(false))
	var ol *client.OverLimitError
	if _, err := c.Submit(context.Background(), "orders", full, 1); !errors.As(err, &ol) || ol.RetryAfter != 3*time.Second {
		t.Fatalf("%v", err)
	}
	if n := len(ing.Submissions()); n != 1 {
		t.Fatalf("%d submissions recorded, want 1", n)
	}
	retrying, _ := client.New(ing.URL, client.WithClock(nil, noSleep))
	if _, err := retrying.Submit(context.Background(), "orders", full, 1); !client.IsOverLimit(err) {
		t.Fatalf("%v", err)
	}
	if n := len(ing.Submissions()); n != 1+client.DefaultMaxAttempts {
		t.Fatalf("%d submissions recorded, want %d", n, 1+client.DefaultMaxAttempts)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL)
	ctx := context.Background()
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	ing.SetReady(false)
	if err := c.Ready(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("not ready: %v", err)
	}
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStatusAndCancel(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken))
	ctx := context.Background()
	m42 := []client.Entry{{Key: "merchant_id", Value: "m-42"}}
	a, err := c.Submit(ctx, "orders", m42, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Submit(ctx, "orders", m42, 2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, b.ID)
	if err != nil || st.State != client.StateQueued || st.Position != 1 || st.Key != "m-42" || st.Rule != clienttest.QueueName {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := c.Status(ctx, "0193a1b2-ffff-7fff-8fff-ffffffffffff"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrNoLongerTracked) {
		t.Fatalf("an id never issued: %v", err)
	}
	var pe *client.ProblemError
	if _, err := c.Status(ctx, "nope"); !errors.As(err, &pe) || pe.Type != client.ProblemNeverSeen {
		t.Fatalf("an id never issued: %v", err)
	}
	got, err := c.Cancel(ctx, a.ID)
	if err != nil || got.ID != a.ID || got.State != client.StateQueued {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if _, err := c.Status(ctx, a.ID); !errors.Is(err, client.ErrNoLongerTracked) {
		t.Fatalf("a cancelled message: %v", err)
	}
	if _, err := c.Cancel(ctx, a.ID); !errors.Is(err, client.ErrNoLongerTracked) {
		t.Fatalf("cancelled twice: %v", err)
	}
	dead, err := c.Admin().Dead(ctx, clienttest.QueueName)
	if err != nil || len(dead) != 3 {
		t.Fatalf("%+v %v", dead, err)
	}
	if _, err := c.Cancel(ctx, dead[0].ID); !errors.Is(err, client.ErrNotCancellable) {
		t.Fatalf("a dead letter: %v", err)
	}
	if _, err := c.Cancel(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if got := ing.Cancelled(); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("Cancelled() = %v", got)
	}
	// A repeated key of a cancelled message: 200 with its id and no state.
	resp, body := do(t, "POST", ing.URL+"/v1/messages", jsonCT, `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-42"}],"payload":1,"idempotency_key":"`+a.IdempotencyKey+`"}`)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"id":"`+a.ID+`"}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// A repeated idempotency key answers only the id and the current state, with Location and
// without rate-limit headers.
func TestDuplicateShape(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	req := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1},"idempotency_key":"k1"}`
	resp, body := do(t, "POST", ing.URL+"/v1/messages", jsonCT, req)
	if resp.StatusCode != 202 || resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	var first map[string]any
	json.Unmarshal(body, &first)
	resp, body = do(t, "POST", ing.URL+"/v1/messages", jsonCT, req)
	var again map[string]any
	json.Unmarshal(body, &again)
	if resp.StatusCode != 200 || len(again) != 2 || again["id"] != first["id"] || again["state"] != "queued" ||
		resp.Header.Get("Location") != "/v1/messages/"+first["id"].(string) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit", "RateLimit-Policy"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("a repeat sends %s: %s", h, v)
		}
	}
}

func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL)
	ctx := context.Background()
	m := []client.Entry{{Key: "merchant_id", Value: "m-1"}}
	if _, err := c.Submit(ctx, "payments", m, 1); !errors.Is(err, client.ErrNoRule) {
		t.Fatalf("an unknown domain: %v", err)
	}
	if _, err := c.Submit(ctx, "orders", []client.Entry{{Key: "user", Value: "u"}}, 1); !errors.Is(err, client.ErrNoRule) {
		t.Fatalf("an unknown descriptor: %v", err)
	}
	var pe *client.ProblemError
	if _, err := c.Submit(ctx, "orders", m, 1, client.WithHeaders(map[string]string{"Host": "evil"})); !errors.As(err, &pe) || pe.Status != 400 || pe.Field != "headers.Host" {
		t.Fatalf("a Host header: %v", err)
	}
	if _, err := c.Submit(ctx, "orders", m, 1, client.WithHeaders(map[string]string{"X-Trace": "a"})); err != nil {
		t.Fatalf("an ordinary header: %v", err)
	}
	sub, err := c.Submit(ctx, "orders", m, 1, client.WithDelay(time.Hour))
	if err != nil || sub.State != client.StateScheduled || sub.ETA.Before(time.Now().Add(59*time.Minute)) || sub.RateLimit.Limit != 0 {
		t.Fatalf("scheduled: %+v %v", sub, err)
	}
	resp, body := do(t, "POST", ing.URL+"/v1/messages", jsonCT, `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"priority":9}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"field":"priority"`) {
		t.Fatalf("an unknown field: %d %s", resp.StatusCode, body)
	}
	resp, _ = do(t, "POST", ing.URL+"/v1/messages", http.Header{"Content-Type": {"text/plain"}}, `{}`)
	if resp.StatusCode != 415 {
		t.Fatalf("text/plain: %d", resp.StatusCode)
	}
	subs := ing.Submissions()
	if len(subs) != 5 || subs[0].Status != 404 || subs[2].Status != 400 || subs[3].Headers["X-Trace"] != "a" || subs[4].DeliverAt.IsZero() {
		t.Fatalf("%+v", subs)
	}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL, client.WithOverLimitRetry(false))
	ctx := context.Background()
	items := []client.BatchItem{
		{Domain: "orders", Descriptor: []client.Entry{{Key: "merchant_id", Value: "m-1"}}, Payload: 1, IdempotencyKey: "b1"},
		{Domain: "orders", Descriptor: []client.Entry{{Key: "merchant_id", Value: clienttest.FullKey}}, Payload: 2},
		{Domain: "nope", Descriptor: []client.Entry{{Key: "merchant_id", Value: "m-1"}}, Payload: 3},
	}
	res, err := c.SubmitBatch(ctx, items)
	if err != nil || len(res) != 3 || res[0].Submission == nil || res[0].Submission.State != client.StateQueued ||
		!client.IsOverLimit(res[1].Err) || !errors.Is(res[2].Err, client.ErrNoRule) {
		t.Fatalf("%+v %v", res, err)
	}
	again, err := c.SubmitBatch(ctx, items[:1])
	if err != nil || again[0].Submission == nil || !again[0].Submission.Duplicate || again[0].Submission.ID != res[0].Submission.ID {
		t.Fatalf("%+v %v", again, err)
	}
	resp, body := do(t, "POST", ing.URL+"/v1/messages", http.Header{"Content-Type": {"application/x-ndjson"}},
		`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-2"}],"payload":1}`+"\n"+
			`{"domain":"orders","descriptor":[],"payload":1}`+"\n")
	var v struct {
		Accepted, Refused int
		Items             []map[string]any
	}
	if json.Unmarshal(body, &v); resp.StatusCode != 200 || v.Accepted != 1 || v.Refused != 1 || v.Items[0]["status"] != 202.0 ||
		v.Items[1]["status"] != 400.0 || v.Items[1]["field"] != "[1].descriptor" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, _ = do(t, "POST", ing.URL+"/v1/messages", http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"x"}}, `[]`)
	if resp.StatusCode != 400 {
		t.Fatalf("Idempotency-Key on a batch: %d", resp.StatusCode)
	}
	subs := ing.Submissions()
	if len(subs) != 6 || !subs[0].Batch || subs[0].ID == "" || subs[1].Status != 429 {
		t.Fatalf("%+v", subs)
	}
}

func TestAdminReset(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken))
	a := c.Admin()
	ctx := context.Background()
	capacity, paused := int64(7), true
	q, err := a.Tune(ctx, clienttest.QueueName, client.Patch{Capacity: &capacity, Paused: &paused})
	if err != nil || q.ETag != "1" || !slices.Equal(q.Overridden, []string{"capacity", "paused"}) || !q.Paused {
		t.Fatalf("%+v %v", q, err)
	}
	q, err = a.Tune(ctx, clienttest.QueueName, client.Patch{Restore: []string{"paused"}, IfMatch: q.ETag})
	if err != nil || q.ETag != "2" || !slices.Equal(q.Overridden, []string{"capacity"}) || q.Paused || q.Capacity != 7 {
		t.Fatalf("restore: %+v %v", q, err)
	}
	q, err = a.Reset(ctx, clienttest.QueueName)
	if err != nil || q.ETag != "0" || len(q.Overridden) != 0 || q.Capacity != 100 || q.Outflow.RequestsPerUnit != 10 {
		t.Fatalf("reset: %+v %v", q, err)
	}
	_, body := do(t, "GET", ing.URL+"/v1/admin/queues/"+clienttest.QueueName, http.Header{"Authorization": {"Bearer " + clienttest.AdminToken}}, "")
	if !bytes.Contains(body, []byte(`"overridden":[]`)) {
		t.Fatalf("%s", body)
	}
	patch := func(ifMatch string) int {
		h := http.Header{"Authorization": {"Bearer " + clienttest.AdminToken}, "Content-Type": {"application/json"}, "If-Match": {ifMatch}}
		resp, _ := do(t, "PATCH", ing.URL+"/v1/admin/queues/"+clienttest.QueueName, h, `{"capacity":9}`)
		return resp.StatusCode
	}
	for _, c := range []struct {
		ifMatch string
		want    int
	}{{"*", 200}, {"3", 200}, {`"4"`, 200}, {`"1"`, 412}, {`W/"4"`, 400}, {`"4", "5"`, 400}} {
		if got := patch(c.ifMatch); got != c.want {
			t.Errorf("If-Match %s: %d, want %d", c.ifMatch, got, c.want)
		}
	}
}

func TestAdminKeysPurgeReplay(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL, client.WithAdminToken(clienttest.AdminToken))
	a := c.Admin()
	ctx := context.Background()
	var ids []string
	for _, k := range []string{"m-1", "m-2", "m-2"} {
		s, err := c.Submit(ctx, "orders", []client.Entry{{Key: "merchant_id", Value: k}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	keys, complete, err := a.HotKeys(ctx, clienttest.QueueName, 1)
	if err != nil || !complete || len(keys) != 1 || keys[0].Key != "m-2" || keys[0].Depth != 2 {
		t.Fatalf("%+v %v %v", keys, complete, err)
	}
	if err := a.PurgeKey(ctx, clienttest.QueueName, "m-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, ids[1]); !errors.Is(err, client.ErrNoLongerTracked) {
		t.Fatalf("purged: %v", err)
	}
	if _, err := c.Status(ctx, ids[0]); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if err := a.PurgeQueue(ctx, clienttest.QueueName); err != nil {
		t.Fatal(err)
	}
	if keys, _, err := a.HotKeys(ctx, clienttest.QueueName, 0); err != nil || len(keys) != 0 {
		t.Fatalf("%+v %v", keys, err)
	}
	if err := a.PurgeQueue(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("%v", err)
	}
	rep, err := a.ReplayAll(ctx, clienttest.QueueName, 2)
	if err != nil || rep.Replayed != 2 || rep.Next == nil {
		t.Fatalf("%+v %v", rep, err)
	}
	if rep, err = a.ReplayDead(ctx, *rep.Next); err != nil || rep.Replayed != 1 || rep.Next != nil {
		t.Fatalf("%+v %v", rep, err)
	}
	if dead, err := a.Dead(ctx, ""); err != nil || len(dead) != 0 {
		t.Fatalf("%+v %v", dead, err)
	}
	if _, err := a.Replay(ctx, "0193a1b2-0000-7000-8000-000000000001"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("no longer dead: %v", err)
	}
	if st, err := c.Status(ctx, "0193a1b2-0000-7000-8000-000000000001"); err != nil || st.State != client.StateQueued {
		t.Fatalf("%+v %v", st, err)
	}
}

// Checks count per descriptor over the fake's life and send the rate-limit headers.
func TestCheckCounts(t *testing.T) {
	t.Parallel()
	ing := clienttest.Start(t)
	c, _ := client.New(ing.URL)
	ctx := context.Background()
	login := [][]client.Entry{{{Key: "auth_type", Value: "login"}}}
	for n := 1; n <= 6; n++ {
		r, err := c.Check(ctx, "auth", login, 1)
		if err != nil {
			t.Fatal(err)
		}
		wantOK, remaining := n <= 5, int64(max(0, 5-n))
		if r.OK() != wantOK || r.Statuses[0].LimitRemaining != remaining || r.RateLimit.Remaining != remaining || r.RateLimit.Limit != 5 {
			t.Fatalf("hit %d: %+v", n, r)
		}
	}
	other, err := c.Check(ctx, "auth", [][]client.Entry{{{Key: "auth_type", Value: "signup"}}}, 1)
	if err != nil || !other.OK() {
		t.Fatalf("another descriptor: %+v %v", other, err)
	}
	resp, _ := do(t, "POST", ing.URL+"/v1/check", jsonCT, `{"domain":"auth","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`)
	want := map[string]string{"Retry-After": "42", "X-RateLimit-Retry-After": "42", "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset": "42", "RateLimit-Policy": `"login";q=5;w=60`, "RateLimit": `"login";r=0;t=42`}
	for h, v := range want {
		if got := resp.Header.Get(h); got != v {
			t.Errorf("%s: %q, want %q", h, got, v)
		}
	}
	if resp.StatusCode != 429 {
		t.Fatalf("%d", resp.StatusCode)
	}
	ing.ResetChecks()
	if r, err := c.Check(ctx, "auth", login, 1); err != nil || !r.OK() {
		t.Fatalf("after ResetChecks: %+v %v", r, err)
	}
}
