package ingress_test

import (
	"strings"
	"testing"
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
