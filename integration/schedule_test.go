package integration_test

import (
	"github.com/sluice-io/sluice/internal/sinktest"

	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Scheduled delivery: a message with a delay (or a deliver_at) answers 202 "scheduled" with
// its eta, reads "scheduled" until then, and reaches the sink no earlier; a deliver_at in
// the past is queued at once; a key's scheduled messages are capped at submit (429); a
// scheduled message can be cancelled and is then never delivered.
func TestScheduledDelivery(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: reminders
descriptors:
  - key: user_id
    name: reminders
    queue: {capacity: 10, max_scheduled: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK/reminders"}
`)
	post := func(user, extra string) answer {
		t.Helper()
		return s.postJSON(`{"domain":"reminders","descriptor":[{"key":"user_id","value":"` + user + `"}],"payload":{"u":"` + user + `"}` + extra + `}`)
	}
	sent := time.Now()
	a := post("u-1", `,"delay":"2s"`)
	if a.Code != 202 || a.Body["state"] != "scheduled" {
		t.Fatalf("scheduled submit: %d %v", a.Code, a.Body)
	}
	eta, err := time.Parse(time.RFC3339Nano, a.Body["eta"].(string))
	if err != nil || eta.Before(sent.Add(2*time.Second)) || eta.After(sent.Add(3100*time.Millisecond)) {
		t.Fatalf("eta %v for a 2 s delay sent at %v", a.Body["eta"], sent)
	}
	id := a.Body["id"].(string)
	if st := s.get("/v1/messages/"+id, false); st.Body["state"] != "scheduled" || st.Body["deliver_at"] == nil {
		t.Fatalf("status while scheduled: %v", st.Body)
	}
	now := post("u-2", `,"deliver_at":"2020-01-01T00:00:00Z"`)
	if now.Code != 202 || now.Body["state"] != "queued" {
		t.Fatalf("a deliver_at in the past: %d %v", now.Code, now.Body)
	}
	// max_scheduled: 3 per key.
	var extra []string
	for i := 0; i < 2; i++ {
		b := post("u-1", `,"delay":"1h"`)
		if b.Code != 202 {
			t.Fatalf("scheduled %d: %d %v", i+2, b.Code, b.Body)
		}
		extra = append(extra, b.Body["id"].(string))
	}
	if over := post("u-1", `,"delay":"1h"`); over.Code != 429 {
		t.Fatalf("a 4th scheduled message of one key (max_scheduled 3): %d %v", over.Code, over.Body)
	}
	if other := post("u-3", `,"delay":"1h"`); other.Code != 202 {
		t.Fatalf("another key is not capped by u-1's: %d %v", other.Code, other.Body)
	}
	// The queue's view counts them: u-1's three (the 2 s one and two hour-later ones) and u-3's.
	if q := s.get("/v1/admin/queues/reminders", true); q.Body["scheduled"] != float64(4) {
		t.Fatalf("scheduled in the queue's view: %v", q.Body)
	}
	// Cancel one of the hour-later ones: it is gone, and never delivered.
	req, _ := http.NewRequest("DELETE", s.base+"/v1/messages/"+extra[0], nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("cancel a scheduled message: %v %v", resp, err)
	}
	resp.Body.Close()
	if st := s.get("/v1/messages/"+extra[0], false); st.Code != 200 || st.Body["state"] != "cancelled" {
		t.Fatalf("a cancelled scheduled message (delivered records kept): %d %v, want 200 cancelled", st.Code, st.Body)
	}
	if bad := post("u-1", `,"delay":"2s","deliver_at":"2030-01-01T00:00:00Z"`); bad.Code != 400 || bad.Body["field"] != "delay" {
		t.Fatalf("both delay and deliver_at: %d %v", bad.Code, bad.Body)
	}
	if far := post("u-1", `,"delay":"9000h"`); far.Code != 400 {
		t.Fatalf("a delay past -max-delay: %d %v", far.Code, far.Body)
	}

	// The 2 s one reaches the sink at its time, not before; the past one at once.
	acc := s.sink.WaitAccepted(2, 15*time.Second)
	var scheduledAt time.Time
	for _, d := range acc {
		if d.ID == id {
			scheduledAt = d.At
		}
	}
	if scheduledAt.IsZero() {
		t.Fatalf("the scheduled message was not delivered: %v", acc)
	}
	if scheduledAt.Before(sent.Add(2 * time.Second)) {
		t.Fatalf("delivered %v after submit, asked for 2 s", scheduledAt.Sub(sent))
	}
	t.Logf("a 2 s delay was delivered %v after submit (eta said %v)", scheduledAt.Sub(sent).Round(time.Millisecond), eta.Sub(sent).Round(time.Millisecond))
	if st := s.waitState(id, "delivered", 5*time.Second); st.Body["state"] != "delivered" {
		t.Fatalf("status after delivery: %v", st.Body)
	}
}

// Expiry: a message still waiting past its ttl (or its rule's queue.max_age) is never
// delivered; it becomes a dead letter with reason "expired", which its status says.
func TestExpiredMessagesAreDeadNotDelivered(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: offers
descriptors:
  - key: user_id
    name: offers
    queue: {capacity: 10, max_age: 1h, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK/offers"}
`)
	patch := func(body string) { t.Helper(); s.patchQueue("offers", body) }
	post := func(extra string) answer {
		t.Helper()
		return s.postJSON(`{"domain":"offers","descriptor":[{"key":"user_id","value":"u-1"}],"payload":1` + extra + `}`)
	}
	patch(`{"paused":true}`)
	time.Sleep(1200 * time.Millisecond) // every drainer sees the pause within a second
	short := post(`,"ttl":"1s"`)
	long := post(``) // the rule's max_age: an hour
	if short.Code != 202 || long.Code != 202 {
		t.Fatalf("submits: %v %v", short, long)
	}
	if bad := post(`,"ttl":"1s","delay":"1m"`); bad.Code != 400 {
		t.Fatalf("a message that expires before its delivery time: %d %v", bad.Code, bad.Body)
	}
	time.Sleep(1500 * time.Millisecond) // the scenario: the short ttl passes while paused
	patch(`{"paused":false}`)
	acc := s.sink.WaitAccepted(1, 10*time.Second)
	if len(acc) != 1 || acc[0].ID != long.Body["id"] {
		t.Fatalf("delivered %v, want only the message that had not expired", acc)
	}
	st := s.waitState(short.Body["id"].(string), "dead", 10*time.Second)
	if st.Body["state"] != "dead" || st.Body["last_error"] != "expired" {
		t.Fatalf("the expired message: %v", st.Body)
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong delivery to arrive
	if n := len(s.sink.All()); n != 1 {
		t.Fatalf("the sink got %d deliveries, want 1", n)
	}
}

// A submission's own headers reach the sink with its delivery; transport and sluice's own
// headers cannot be set, and the limits are named when broken.
func TestSubmissionHeadersReachTheSink(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: hooks
descriptors:
  - key: tenant
    name: hooks
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK/hooks"}
`)
	post := func(headers string) answer {
		t.Helper()
		return s.postJSON(`{"domain":"hooks","descriptor":[{"key":"tenant","value":"t-1"}],"payload":{"x":1},"headers":` + headers + `}`)
	}
	ok := post(`{"x-api-version":"2","X-Tenant":"t 1","x-trace":"abc"}`)
	if ok.Code != 202 {
		t.Fatalf("submit with headers: %d %v", ok.Code, ok.Body)
	}
	for _, bad := range []struct{ headers, field string }{
		{`{"Host":"evil"}`, "headers.Host"},
		// Credentials are the sink's to check, never a submitter's to set (docs/http-api.md).
		{`{"authorization":"Bearer gw-token-1"}`, "headers.authorization"},
		{`{"idempotency-key":"x"}`, "headers.idempotency-key"},
		{`{"Sluice-Fence":"9"}`, "headers.Sluice-Fence"},
		{`{"X-A":"line\nbreak"}`, "headers.X-A"},
		{`{"bad name":"v"}`, "headers"},
		{`{"X-Long":"` + strings.Repeat("v", 1025) + `"}`, "headers.X-Long"},
	} {
		if a := post(bad.headers); a.Code != 400 || a.Body["field"] != bad.field {
			t.Errorf("headers %s: %d %v, want 400 naming %s", bad.headers, a.Code, a.Body, bad.field)
		}
	}
	acc := s.sink.WaitAccepted(1, 10*time.Second)
	if len(acc) != 1 {
		t.Fatalf("deliveries: %v", acc)
	}
	h := acc[0].Header
	if h.Get("X-Api-Version") != "2" || h.Get("Authorization") != "" || h.Get("X-Tenant") != "t 1" || h.Get("X-Trace") != "abc" ||
		h.Get("Idempotency-Key") != ok.Body["id"] || h.Get("Content-Type") != "application/json" {
		t.Fatalf("sink headers: %v", h)
	}
}

// Parked messages of one key go back into its queue in the order they were submitted
// (strict ordering): a burst into a queue of one parks all but the first, and the sink
// gets every message of each key in submission order.
func TestParkedMessagesReenterInOrder(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders-parked-order
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 20}}
    overflow: park
    sink: {url: "SINK/o"}
`)
	// Paused while submitting, so no place frees up for a later submission to take ahead
	// of the parked ones (a message admitted while older ones of its key are parked is not
	// what this test is about).
	pause := func(on bool) { t.Helper(); s.patchQueue("orders-parked-order", fmt.Sprintf(`{"paused":%v}`, on)) }
	pause(true)
	time.Sleep(1200 * time.Millisecond) // every drainer sees the pause within a second
	const keys, per = 3, 8
	want := map[string][]string{}
	parked := 0
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("m-%d", k)
			a := s.submit("orders", [][2]string{{"merchant_id", key}}, fmt.Sprintf(`{"n":%d}`, i))
			if a.Code != 202 {
				t.Fatalf("submit: %d %v", a.Code, a.Body)
			}
			if a.Body["state"] == "parked" {
				parked++
			}
			want[key] = append(want[key], a.Body["id"].(string))
		}
	}
	if parked != keys*(per-1) {
		t.Fatalf("%d of %d parked, want all but each key's first", parked, keys*per)
	}
	pause(false)
	acc := s.sink.WaitAccepted(keys*per, 60*time.Second)
	got := map[string][]string{}
	for _, d := range acc {
		got[d.Key] = append(got[d.Key], d.ID)
	}
	for key, ids := range want {
		if strings.Join(got[key], ",") != strings.Join(ids, ",") {
			t.Errorf("key %s delivered out of submission order:\n got %v\nwant %v", key, got[key], ids)
		}
	}
}

// A relaxed rule's delivery retries go back through the retry stream, one re-admission per
// failed attempt, all within the queue stream's two-minute duplicate window: each must be
// stored (each has an id of its own, retry.AdmitMsgID), or the message is lost after its
// second failure. The sink fails twice, then accepts: the message arrives on its third
// attempt, once.
func TestRelaxedRetriesReadmittedTwiceAreDelivered(t *testing.T) {
	t.Parallel()
	s := startSystem(t, `
domain: relaxed
descriptors:
  - key: k
    name: relaxed
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    ordering: relaxed
    delivery: {max_attempts: 5, min_backoff: 1s, max_backoff: 1s}
    sink: {url: "SINK/r"}
`)
	s.sink.Answer(func(d sinktest.Delivery) (int, string) {
		if d.Attempt < 3 {
			return 500, ""
		}
		return 200, ""
	})
	a := s.submit("relaxed", [][2]string{{"k", "once"}}, `{"n":1}`)
	if a.Code != 202 {
		t.Fatalf("submit: %d %v", a.Code, a.Body)
	}
	acc := s.sink.WaitAccepted(1, 30*time.Second)
	if len(acc) != 1 || acc[0].ID != a.Body["id"] || acc[0].Attempt != 3 {
		t.Fatalf("accepted %+v, want the message once, on its third attempt (all: %+v)", acc, s.sink.All())
	}
	time.Sleep(1500 * time.Millisecond) // room for a duplicate to arrive
	if n := len(s.sink.Accepted()); n != 1 {
		t.Fatalf("accepted %d times", n)
	}
}

// The same across processes: two drainer processes, each with its re-admitter, share the
// retry stream. The re-admitters' consumer is pinned to one of them at a time, so the
// parked messages of a key never reach two processes at once and re-enter its queue in
// submission order (without the pin, each process took some of every key's messages).
func TestParkedMessagesReenterInOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOptions{rules: `
domain: orders
descriptors:
  - key: merchant_id
    name: parked-order
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 20}}
    overflow: park
    sink: {url: "SINK/o"}
`, procEnv: []string{"SLUICE_READMIT_MAX_BACKOFF=1s"}})
	pause := func(on bool) {
		t.Helper()
		if r := c.admin(0, "PATCH", "/v1/admin/queues/parked-order", fmt.Sprintf(`{"paused":%v}`, on)); r.Code != 200 {
			t.Fatalf("pause %v: %d %v %v", on, r.Code, r.Body, r.Err)
		}
	}
	pause(true)
	time.Sleep(1500 * time.Millisecond) // every drainer sees the pause
	const keys, per = 4, 8
	want := map[string][]string{}
	for i := range per {
		for k := range keys {
			key := fmt.Sprintf("m-%d", k)
			a := c.submit((i+k)%2, "orders", []kv{{"merchant_id", key}}, fmt.Sprintf(`{"n":%d}`, i), "")
			if a.Code != 202 {
				t.Fatalf("submit: %d %v %v", a.Code, a.Body, a.Err)
			}
			if state := a.str("state"); (i == 0) != (state == "queued") {
				t.Fatalf("submission %d of %s answered %q", i, key, state)
			}
			want[key] = append(want[key], a.str("id"))
		}
	}
	pause(false)
	var ids []string
	for _, v := range want {
		ids = append(ids, v...)
	}
	got := map[string][]string{}
	for _, d := range c.waitIDs(ids, 90*time.Second) {
		got[d.Key] = append(got[d.Key], d.ID)
	}
	for key, ids := range want {
		if strings.Join(got[key], ",") != strings.Join(ids, ",") {
			t.Errorf("key %s delivered out of submission order:\n got %v\nwant %v", key, got[key], ids)
		}
	}
}
