package ingress_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/process/ingress"
)

// A repeated scheduled submission whose message has left since (cancelled here; delivered
// is the same) is not scheduled again: within the stream's duplicate window the repeat
// re-admits under the original's id, and the retry stream knows that schedule by it.
func TestRepeatOfCancelledScheduledIsNotScheduledAgain(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	body := submit("orders", merchant("m-sch"), `{"order_id":1}`, "idempotency_key", "sch-1", "delay", "1h")
	first := e.do("POST", "/v1/messages", body)
	id, _ := first.body["id"].(string)
	if first.code != 202 || first.body["state"] != "scheduled" || id == "" {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	if r := e.do("DELETE", "/v1/messages/"+id, ""); r.code != 200 {
		t.Fatalf("cancel: %d %s", r.code, r.raw)
	}
	again := e.do("POST", "/v1/messages", body)
	if _, has := again.body["state"]; again.code != 200 || again.body["id"] != id || has {
		t.Fatalf("repeat after cancel: %d %s; want 200 with the id and no state (it has left)", again.code, again.raw)
	}
	if st := e.do("GET", "/v1/messages/"+id, ""); st.code != 404 || !strings.HasSuffix(st.body["type"].(string), "#no-longer-tracked") {
		t.Fatalf("status after the repeat: %d %s; the repeat scheduled it again", st.code, st.raw)
	}
}

// With delivered records kept (-status-keep), a cancelled message's status says
// "cancelled" (not "no longer tracked"), a repeated cancel answers the same 200, and a
// repeat of its idempotency key answers 200 with that state, admitting nothing.
func TestCancelledStatusWithRecords(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *ingress.Config) { c.StatusKeep = time.Hour })
	body := submit("orders", merchant("m-cx"), `{"order_id":1}`, "idempotency_key", "cx-1", "delay", "1h")
	first := e.do("POST", "/v1/messages", body)
	id, _ := first.body["id"].(string)
	if first.code != 202 || id == "" {
		t.Fatalf("first: %d %s", first.code, first.raw)
	}
	if r := e.do("DELETE", "/v1/messages/"+id, ""); r.code != 200 || r.body["state"] != "scheduled" {
		t.Fatalf("cancel: %d %s", r.code, r.raw)
	}
	if st := e.do("GET", "/v1/messages/"+id, ""); st.code != 200 || st.body["state"] != "cancelled" || st.body["key"] != "m-cx" {
		t.Fatalf("status after cancel: %d %s; want 200 cancelled", st.code, st.raw)
	}
	if r := e.do("DELETE", "/v1/messages/"+id, ""); r.code != 200 || r.body["state"] != "cancelled" || r.body["cancelled"] != true {
		t.Fatalf("cancel again: %d %s", r.code, r.raw)
	}
	if again := e.do("POST", "/v1/messages", body); again.code != 200 || again.body["id"] != id || again.body["state"] != "cancelled" {
		t.Fatalf("repeat after cancel: %d %s; want 200 cancelled", again.code, again.raw)
	}
}
