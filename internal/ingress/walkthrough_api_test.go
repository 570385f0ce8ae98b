package ingress_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// An idempotent repeat whose original has left sluice (purged here) within JetStream's
// duplicate window says so — no state — rather than "queued": the republish under the
// original's id is dropped by the stream as a duplicate, and nothing is queued.
func TestRepeatAfterPurgeHasNoState(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	if r := e.admin("PATCH", "/v1/admin/queues/orders", `{"paused":true}`); r.code != 200 {
		t.Fatalf("pause: %d %s", r.code, r.raw)
	}
	body := submit("orders", merchant("m-pur"), `{"order_id":1}`, "idempotency_key", "pur-1")
	first := e.do("POST", "/v1/messages", body)
	id, _ := first.body["id"].(string)
	if first.code != 202 || first.body["state"] != "queued" || id == "" {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	// While it is queued, a repeat says so.
	if r := e.do("POST", "/v1/messages", body); r.code != 200 || r.body["id"] != id || r.body["state"] != "queued" {
		t.Fatalf("repeat while queued: %d %s", r.code, r.raw)
	}
	if r := e.admin("POST", "/v1/admin/queues/orders/purge", ""); r.code != 204 {
		t.Fatalf("purge: %d %s", r.code, r.raw)
	}
	if st := e.do("GET", "/v1/messages/"+id, ""); st.code != 404 || !strings.HasSuffix(st.body["type"].(string), "#no-longer-tracked") {
		t.Fatalf("status after purge: %d %s", st.code, st.raw)
	}
	again := e.do("POST", "/v1/messages", body)
	if _, has := again.body["state"]; again.code != 200 || again.body["id"] != id || has {
		t.Fatalf("repeat after purge: %d %s; want 200 with the id and no state (the original has left)", again.code, again.raw)
	}
	if again.header.Get("Location") != "/v1/messages/"+id {
		t.Fatalf("Location %q", again.header.Get("Location"))
	}
	if k := e.admin("GET", "/v1/admin/queues/orders/keys/m-pur", ""); k.body["depth"] != float64(0) {
		t.Fatalf("the repeat queued something: %s", k.raw)
	}
}

// A replay into a full key is refused as a submission to that key is: 429
// #quota-exceeded titled "Quota exceeded", with violated-policies, the same Retry-After
// (depth ÷ outflow) and the rate-limit headers.
func TestReplayIntoFullKeyIsQuotaExceeded(t *testing.T) {
	t.Parallel()
	e := start(t, nil) // orders: capacity 3, 10/s
	for i := 0; i < 3; i++ {
		if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-full"), strconv.Itoa(i))); r.code != 202 {
			t.Fatalf("submit %d: %d %s", i, r.code, r.raw)
		}
	}
	refused := e.do("POST", "/v1/messages", submit("orders", merchant("m-full"), `9`))
	if refused.code != 429 {
		t.Fatalf("submission to the full key: %d %s", refused.code, refused.raw)
	}
	_, js := natstest.Connect(t, e.nats.URL())
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.NewID("orders", "m-full")
	if err != nil {
		t.Fatal(err)
	}
	m := queue.Message{ID: id, Rule: "orders", Key: "m-full", Payload: []byte(`1`), CreatedAt: time.Now(), Attempt: 8, LastError: "sink answered 500"}
	if err := dead.Dead(context.Background(), "orders", m, "max attempts reached"); err != nil {
		t.Fatal(err)
	}
	r := e.admin("POST", "/v1/admin/dead/"+id+"/replay", "")
	if r.code != 429 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("replay into a full key: %d %s", r.code, r.raw)
	}
	for _, member := range []string{"type", "title", "violated-policies", "retry_after"} {
		if got, want := r.body[member], refused.body[member]; !equalJSON(got, want) {
			t.Errorf("replay's %s = %v, want %v as for a submission", member, got, want)
		}
	}
	if r.body["title"] != "Quota exceeded" {
		t.Errorf("title %v", r.body["title"])
	}
	if d, _ := r.body["detail"].(string); !strings.Contains(d, "the dead letter is kept") {
		t.Errorf("detail %q does not say the dead letter is kept", d)
	}
	for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Retry-After", "RateLimit-Policy"} {
		if got, want := r.header.Get(h), refused.header.Get(h); got == "" || got != want {
			t.Errorf("replay's %s = %q, want %q as for a submission", h, got, want)
		}
	}
	for _, h := range []string{"X-RateLimit-Reset", "RateLimit"} { // the head's next slot moves on: present is enough
		if r.header.Get(h) == "" {
			t.Errorf("replay's 429 has no %s", h)
		}
	}
	if l := e.admin("GET", "/v1/admin/dead?queue=orders", ""); len(l.body["messages"].([]any)) != 1 {
		t.Fatalf("the dead letter was not kept: %s", l.raw)
	}
}

func equalJSON(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok || bok {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
		return true
	}
	return a == b
}

// Too many scheduled messages for a key: the Retry-After is the time until the refused
// message's own delivery time (then a retry is no longer scheduled, see submit.go's
// scheduledFull), not a constant minute.
func TestTooManyScheduledRetryAfter(t *testing.T) {
	t.Parallel()
	e := start(t, nil) // orders: capacity 3, so max_scheduled 3
	for i := 0; i < 3; i++ {
		if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-sched"), strconv.Itoa(i), "delay", "1h")); r.code != 202 || r.body["state"] != "scheduled" {
			t.Fatalf("schedule %d: %d %s", i, r.code, r.raw)
		}
	}
	for _, c := range []struct {
		field, value string
		want         int64
	}{
		{"delay", "90s", 90},
		{"deliver_at", time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339), 7200},
	} {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-sched"), `9`, c.field, c.value))
		if r.code != 429 || !strings.HasSuffix(r.body["type"].(string), "#quota-exceeded") || r.body["title"] != "Quota exceeded" {
			t.Fatalf("%s %s over max_scheduled: %d %s", c.field, c.value, r.code, r.raw)
		}
		got, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
		if err != nil || got < c.want-3 || got > c.want {
			t.Errorf("%s %s: Retry-After %q, want about %d (until its own delivery time)", c.field, c.value, r.header.Get("Retry-After"), c.want)
		}
		if r.body["retry_after"] != float64(got) {
			t.Errorf("retry_after %v, Retry-After %d", r.body["retry_after"], got)
		}
		if vp, _ := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "orders" {
			t.Errorf("violated-policies %v", r.body["violated-policies"])
		}
	}
}

// reset is true or absent: {"reset": false} would change nothing and be audited as a
// resume.
func TestAdminPatchResetFalseRefused(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for _, body := range []string{`{"reset":false}`, `{"reset":null}`, `{"reset":"yes"}`} {
		r := e.admin("PATCH", "/v1/admin/queues/orders", body)
		d, _ := r.body["detail"].(string)
		if r.code != 400 || r.body["field"] != "reset" || !strings.HasPrefix(d, "must be true; omit it otherwise") {
			t.Errorf("PATCH %s: %d %s; want 400 naming reset", body, r.code, r.raw)
		}
	}
	// Each is in the audit trail as a failed call, none as a change.
	a := e.admin("GET", "/v1/admin/audit", "")
	recs, _ := a.body["records"].([]any)
	for _, r := range recs {
		if r.(map[string]any)["action"] != "failed" {
			t.Errorf("a refused PATCH is in the audit trail as a change: %s", a.raw)
		}
	}
	if a.code != 200 || len(recs) != 3 {
		t.Errorf("audit trail: %s, want the 3 failed PATCHes", a.raw)
	}
}

// The admin PATCH takes JSON bodies only (application/json, application/merge-patch+json),
// as the submit endpoint: anything else is 415 #invalid-request.
func TestAdminPatchContentType(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/jsonx"} {
		r := e.do("PATCH", "/v1/admin/queues/orders", `{"paused":true}`, "Authorization", "Bearer "+e.token, "Content-Type", ct)
		if r.code != 415 || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.HasSuffix(r.body["type"].(string), "#invalid-request") || r.body["title"] != "Unsupported media type" {
			t.Errorf("PATCH with Content-Type %s: %d %s", ct, r.code, r.raw)
		}
	}
	if g := e.admin("GET", "/v1/admin/queues/orders", ""); g.body["paused"] != false {
		t.Fatalf("a refused PATCH paused the queue: %s", g.raw)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json", "Application/JSON"} {
		r := e.do("PATCH", "/v1/admin/queues/orders", `{"capacity":4}`, "Authorization", "Bearer "+e.token, "Content-Type", ct)
		if r.code != 200 {
			t.Errorf("PATCH with Content-Type %s: %d %s", ct, r.code, r.raw)
		}
	}
}

// An id of an earlier version (a bare uuid) names no rule or key: its #no-longer-tracked
// carries issued_at (a uuid v7's time) and neither rule nor key.
func TestLegacyIDNoLongerTracked(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	r := e.do("GET", "/v1/messages/0193a1b2-7c4d-7e5f-8a9b-0c1d2e3f4a5b", "")
	if r.code != 404 || !strings.HasSuffix(r.body["type"].(string), "#no-longer-tracked") {
		t.Fatalf("legacy id: %d %s", r.code, r.raw)
	}
	if _, has := r.body["rule"]; has {
		t.Errorf("rule in %s", r.raw)
	}
	if _, has := r.body["key"]; has {
		t.Errorf("key in %s", r.raw)
	}
	if at, _ := r.body["issued_at"].(string); at != "2024-12-07T15:17:29Z" {
		t.Errorf("issued_at %q in %s", at, r.raw)
	}
}
