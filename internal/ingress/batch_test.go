package ingress_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/ingress"
)

type batchAnswer struct {
	Accepted, Refused int
	Items             []map[string]any
}

func (e *env) batch(t *testing.T, body string, header ...string) (int, batchAnswer) {
	t.Helper()
	r := e.do("POST", "/v1/messages", body, header...)
	var a batchAnswer
	if r.code == 200 {
		if err := json.Unmarshal([]byte(r.raw), &a); err != nil {
			t.Fatalf("batch answer %s: %v", r.raw, err)
		}
	}
	return r.code, a
}

// One request carries many submissions, each answered on its own and in order: a bad item
// or a full queue fails only itself; the items of one key enter its queue in the order
// given; a repeated idempotency key inside the batch is answered as a repeat.
func TestBatchSubmit(t *testing.T) {
	e := start(t, nil)
	items := []string{
		submit("orders", merchant("m-1"), `{"n":1}`),
		submit("orders", merchant("m-1"), `{"n":2}`, "idempotency_key", "order-2"),
		submit("orders", merchant("m-2"), `{"n":1}`),
		`{"domain":"orders","descriptor":[],"payload":1}`,
		submit("nowhere", merchant("m-1"), `1`),
		submit("orders", merchant("m-1"), `{"n":2}`, "idempotency_key", "order-2"),
		submit("orders", merchant("m-1"), `{"n":3}`),
		submit("orders", merchant("m-1"), `{"n":4}`),
		submit("parking", merchant("p"), `{"n":1}`),
		submit("parking", merchant("p"), `{"n":2}`),
	}
	code, a := e.batch(t, "["+strings.Join(items, ",")+"]")
	if code != 200 || len(a.Items) != len(items) {
		t.Fatalf("batch: %d %+v", code, a)
	}
	want := []struct {
		status float64
		state  string
		field  string
	}{
		{202, "queued", ""}, {202, "queued", ""}, {202, "queued", ""},
		{400, "", "[3].descriptor"}, {404, "", ""}, {200, "queued", ""},
		{202, "queued", ""}, {429, "", ""}, {202, "queued", ""}, {202, "parked", ""},
	}
	for i, w := range want {
		it := a.Items[i]
		if it["status"] != w.status || (w.state != "" && it["state"] != w.state) || (w.field != "" && it["field"] != w.field) {
			t.Errorf("item %d: %v, want status %v state %q field %q", i, it, w.status, w.state, w.field)
		}
	}
	if a.Accepted != 7 || a.Refused != 3 {
		t.Errorf("accepted %d refused %d, want 7 and 3", a.Accepted, a.Refused)
	}
	if a.Items[5]["id"] != a.Items[1]["id"] {
		t.Errorf("the repeat of order-2 answered %v, the original is %v", a.Items[5]["id"], a.Items[1]["id"])
	}
	if a.Items[7]["retry_after"] == nil || a.Items[7]["type"] != "https://sluice.dev/problems#quota-exceeded" {
		t.Errorf("the refused item says nothing of when to retry: %v", a.Items[7])
	}
	// m-1's three stored items are in its queue in the order given.
	for pos, i := range []int{0, 1, 6} {
		st := e.do("GET", "/v1/messages/"+a.Items[i]["id"].(string), "")
		if st.code != 200 || st.body["position"] != float64(pos) {
			t.Errorf("item %d: %d %s, want position %d", i, st.code, st.raw, pos)
		}
	}

	// NDJSON too; an empty batch and a header idempotency key are refused whole.
	code, a = e.batch(t, submit("orders", merchant("m-3"), `1`)+"\n\n"+submit("orders", merchant("m-3"), `2`)+"\n",
		"Content-Type", "application/x-ndjson")
	if code != 200 || a.Accepted != 2 || a.Items[1]["depth"] != float64(2) {
		t.Fatalf("NDJSON batch: %d %+v", code, a)
	}
	if r := e.do("POST", "/v1/messages", "[]"); r.code != 400 || r.body["field"] != "items" {
		t.Fatalf("empty batch: %d %s", r.code, r.raw)
	}
	if r := e.do("POST", "/v1/messages", "["+items[0]+"]", "Idempotency-Key", "k"); r.code != 400 || r.body["field"] != "Idempotency-Key" {
		t.Fatalf("batch with an Idempotency-Key header: %d %s", r.code, r.raw)
	}
}

// A batch larger than -max-batch is refused whole with 413, naming the limit.
func TestBatchTooLarge(t *testing.T) {
	e := start(t, func(c *ingress.Config) { c.MaxBatch = 2 })
	var items []string
	for i := 0; i < 3; i++ {
		items = append(items, submit("orders", merchant(fmt.Sprint("m-", i)), `1`))
	}
	r := e.do("POST", "/v1/messages", "["+strings.Join(items, ",")+"]")
	if r.code != http.StatusRequestEntityTooLarge || r.body["field"] != "items" || !strings.Contains(r.body["detail"].(string), "at most 2") {
		t.Fatalf("batch of 3 with -max-batch 2: %d %s", r.code, r.raw)
	}
}
