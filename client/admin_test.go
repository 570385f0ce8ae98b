package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

const queueBody = `{"name":"orders-per-merchant","capacity":100,"outflow":{"unit":"second","requests_per_unit":10},"total_outflow":{"unit":"second","requests_per_unit":200},"paused":false,"depth":1234,"active_keys":56,"in_flight":3,"parked":7,"dead":1,"drained_per_second":198.5}`

func TestAdminQueues(t *testing.T) {
	t.Parallel()
	s := newScript(t,
		answer{status: 200, body: `{"queues":[` + queueBody + `]}`},
		answer{status: 200, body: `[` + queueBody + `]`}) // a bare array is read too
	c, _ := newClient(t, s.URL, client.WithAdminToken("s3cret"))
	for range 2 {
		qs, err := c.Admin().Queues(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		q := qs[0]
		if len(qs) != 1 || q.Name != "orders-per-merchant" || q.Capacity != 100 || *q.Outflow != (client.Rate{Unit: "second", RequestsPerUnit: 10}) ||
			q.TotalOutflow.RequestsPerUnit != 200 || q.Depth != 1234 || q.ActiveKeys != 56 || q.InFlight != 3 || q.Parked != 7 || q.Dead != 1 || q.DrainedPerSecond != 198.5 {
			t.Fatalf("%+v", q)
		}
	}
	for _, r := range s.requests() {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.EscapedPath != "/v1/admin/queues" || r.Method != "GET" {
			t.Fatalf("%+v", r)
		}
	}
}

func TestAdminUnauthorized(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 401, body: `{"type":"https://sluice.dev/problems#unauthorized","title":"Unauthorized","status":401}`})
	c, clk := newClient(t, s.URL)
	_, err := c.Admin().Queue(context.Background(), "orders-per-merchant")
	if !errors.Is(err, client.ErrUnauthorized) || len(s.requests()) != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("%v", err)
	}
	if s.requests()[0].Header.Get("Authorization") != "" {
		t.Fatal("sent an empty bearer token")
	}
}

// Keys are data: each one is a single percent-encoded path segment and comes back intact.
func TestAdminKeyEscaping(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, body: `{"queue":"q","key":"k","depth":2,"next_dispatch_at":"2026-11-22T05:00:00.1Z"}`})
	c, _ := newClient(t, s.URL, client.WithAdminToken("t"))
	keys := map[string]string{
		"m-42":       "m-42",
		"a/b":        "a%2Fb",
		"../../x":    "..%2F..%2Fx",
		"..":         "%2E%2E",
		".":          "%2E",
		"with space": "with%20space",
		"🙂":          "%F0%9F%99%82",
		"a?b#c%d":    "a%3Fb%23c%25d",
		"q.*.>":      "q.%2A.%3E",
	}
	for key, want := range keys {
		k, err := c.Admin().Key(context.Background(), "orders per/merchant", key)
		if err != nil {
			t.Fatal(err)
		}
		if k.Depth != 2 || !k.NextDispatchAt.Equal(time.Date(2026, 11, 22, 5, 0, 0, 1e8, time.UTC)) {
			t.Fatalf("%+v", k)
		}
		reqs := s.requests()
		got := reqs[len(reqs)-1].EscapedPath
		if got != "/v1/admin/queues/orders%20per%2Fmerchant/keys/"+want {
			t.Errorf("key %q sent as %q", key, got)
		}
		// The server reads back exactly the key from the one segment.
		seg := got[len("/v1/admin/queues/orders%20per%2Fmerchant/keys/"):]
		if back, err := url.PathUnescape(seg); err != nil || back != key {
			t.Errorf("key %q reads back as %q (%v)", key, back, err)
		}
	}
}

func TestAdminTuneResetDeadReplay(t *testing.T) {
	t.Parallel()
	s := newScript(t,
		answer{status: 200, body: queueBody},
		answer{status: 200, body: queueBody},
		answer{status: 200, body: `{"messages":[{"id":"m1","domain":"orders","rule":"orders-per-merchant","key":"m-42","state":"dead","attempts":8,"last_error":"sink: 422 Unprocessable Entity"}]}`},
		answer{status: 202, header: map[string]string{"Location": "/v1/messages/m1"}, body: `{"id":"m1","state":"queued"}`})
	c, _ := newClient(t, s.URL, client.WithAdminToken("t"))
	ctx := context.Background()
	a := c.Admin()
	capacity, paused := int64(500), true
	if _, err := a.Tune(ctx, "orders-per-merchant", client.Patch{Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 20}, Capacity: &capacity, Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Tune(ctx, "orders-per-merchant", client.Patch{}); err == nil {
		t.Fatal("an empty patch was sent")
	}
	if b, err := json.Marshal(client.Patch{Capacity: &capacity, Restore: []string{"outflow", "paused"}}); err != nil || string(b) != `{"capacity":500,"outflow":null,"paused":null}` {
		t.Fatalf("restore patch %s %v", b, err)
	}
	if _, err := json.Marshal(client.Patch{Capacity: &capacity, Restore: []string{"capacity"}}); err == nil {
		t.Fatal("set and restored at once")
	}
	if _, err := a.Reset(ctx, "orders-per-merchant"); err != nil {
		t.Fatal(err)
	}
	dead, err := a.Dead(ctx, "orders-per-merchant")
	if err != nil || len(dead) != 1 || dead[0].ID != "m1" || dead[0].State != client.StateDead || dead[0].Attempts != 8 {
		t.Fatalf("%+v %v", dead, err)
	}
	sub, err := a.Replay(ctx, "m1")
	if err != nil || sub.ID != "m1" || sub.State != client.StateQueued || sub.Location != "/v1/messages/m1" {
		t.Fatalf("%+v %v", sub, err)
	}
	reqs := s.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	tune := decodeBody(t, reqs[0].Body)
	if reqs[0].Method != "PATCH" || reqs[0].EscapedPath != "/v1/admin/queues/orders-per-merchant" || tune["capacity"] != float64(500) || tune["paused"] != true ||
		tune["outflow"].(map[string]any)["requests_per_unit"] != float64(20) || tune["total_outflow"] != nil {
		t.Fatalf("tune %s %s %s", reqs[0].Method, reqs[0].EscapedPath, reqs[0].Body)
	}
	if reqs[1].Method != "PATCH" || string(reqs[1].Body) != `{"reset":true}` {
		t.Fatalf("reset %s %s", reqs[1].Method, reqs[1].Body)
	}
	if reqs[2].RequestURI != "/v1/admin/dead?queue=orders-per-merchant" {
		t.Fatalf("dead %s", reqs[2].RequestURI)
	}
	if reqs[3].Method != "POST" || reqs[3].EscapedPath != "/v1/admin/dead/m1/replay" {
		t.Fatalf("replay %s %s", reqs[3].Method, reqs[3].EscapedPath)
	}
	for _, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer t" {
			t.Fatalf("%s %s without the token", r.Method, r.EscapedPath)
		}
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	s := newScript(t, answer{status: 200, body: "ok"}, answer{status: 503, body: `{"type":"https://sluice.dev/problems#unavailable","title":"Service Unavailable","status":503,"detail":"nats: no servers available"}`})
	c, clk := newClient(t, s.URL)
	if err := c.Healthy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(context.Background()); !errors.Is(err, client.ErrUnavailable) || len(clk.Sleeps()) != 0 {
		t.Fatalf("%v", err)
	}
}

func TestAdminPurgeAndDeadPages(t *testing.T) {
	t.Parallel()
	s := newScript(t,
		answer{status: 204},
		answer{status: 204},
		answer{status: 200, body: `{"messages":[{"id":"m1","rule":"q","key":"k","state":"dead","reason":"max_attempts (8) reached","attempts":8,"last_error":"sink: 500","created_at":"2026-11-22T05:00:00Z","updated_at":"2026-11-22T05:01:00Z"}],"next":"/v1/admin/dead?after=17&limit=1&queue=q"}`},
		answer{status: 200, body: `{"messages":[]}`},
		answer{status: 404, body: `{"type":"https://sluice.dev/problems#not-found","title":"Unknown queue","status":404}`})
	c, clk := newClient(t, s.URL, client.WithAdminToken("t"))
	ctx := context.Background()
	a := c.Admin()
	if err := a.PurgeQueue(ctx, "orders per/merchant"); err != nil {
		t.Fatal(err)
	}
	if err := a.PurgeKey(ctx, "q", "a/b 🙂"); err != nil {
		t.Fatal(err)
	}
	p, err := a.DeadPage(ctx, client.DeadQuery{Queue: "q", Limit: 1})
	if err != nil || len(p.Messages) != 1 || p.Next != "17" || p.Messages[0].Reason != "max_attempts (8) reached" || p.Messages[0].State != client.StateDead {
		t.Fatalf("%+v %v", p, err)
	}
	p, err = a.DeadPage(ctx, client.DeadQuery{Queue: "q", Limit: 1, After: p.Next})
	if err != nil || len(p.Messages) != 0 || p.Next != "" {
		t.Fatalf("%+v %v", p, err)
	}
	if err := a.PurgeQueue(ctx, "nope"); !errors.Is(err, client.ErrNotFound) || len(clk.Sleeps()) != 0 {
		t.Fatalf("%v", err)
	}
	reqs := s.requests()
	for i, want := range []string{
		"POST /v1/admin/queues/orders%20per%2Fmerchant/purge",
		"DELETE /v1/admin/queues/q/keys/a%2Fb%20%F0%9F%99%82",
		"GET /v1/admin/dead?limit=1&queue=q",
		"GET /v1/admin/dead?after=17&limit=1&queue=q",
		"POST /v1/admin/queues/nope/purge",
	} {
		if got := reqs[i].Method + " " + reqs[i].RequestURI; got != want {
			t.Errorf("request %d: %s, want %s", i, got, want)
		}
		if reqs[i].Header.Get("Authorization") != "Bearer t" {
			t.Errorf("request %d without the token", i)
		}
	}
	if _, err := a.DeadPage(ctx, client.DeadQuery{Limit: -1}); err == nil {
		t.Fatal("a negative limit was sent")
	}
}
