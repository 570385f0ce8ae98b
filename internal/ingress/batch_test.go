package ingress_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process/ingress"
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

// A batch answers each item as a submission of it alone would be answered: the same
// submissions, sent one by one to one ingress and as one batch to another, get the same
// statuses, states, depths, fields and problems — queued, repeated and reused idempotency
// keys, a full key, park on overflow, an admission limit, a scheduled item, a rule without
// a queue, bad fields.
func TestBatchAnswersAsSingleSubmissions(t *testing.T) {
	t.Parallel()
	marketing := [][2]string{{"message_type", "marketing"}, {"user_id", "u-1"}}
	subs := []string{
		submit("orders", merchant("m-1"), `{"n":1}`),
		submit("orders", merchant("m-1"), `{"n":2}`, "idempotency_key", "k-1"),
		submit("orders", merchant("m-1"), `{"n":2}`, "idempotency_key", "k-1"),
		submit("orders", merchant("m-1"), `{"n":9}`, "idempotency_key", "k-1"),
		submit("orders", merchant("m-1"), `{"n":3}`),
		submit("orders", merchant("m-1"), `{"n":4}`),
		submit("parking", merchant("p"), `{"n":1}`),
		submit("parking", merchant("p"), `{"n":2}`),
		submit("messaging", marketing, `1`),
		submit("messaging", marketing, `2`),
		submit("messaging", marketing, `3`),
		submit("auth", [][2]string{{"auth_type", "login"}}, `1`),
		submit("orders", merchant("m-2"), `{"n":1}`, "delay", "1h"),
		submit("orders", merchant("m-2"), `{"n":2}`, "delay", "1h", "ttl", "1m"),
		submit("orders", nil, `1`),
		submit("nowhere", merchant("m-1"), `1`),
		`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-3"}]}`,
		submit("orders", merchant("m-2"), `{"n":3}`),
	}
	// what is compared of an answer; its id is replaced by the index of the submission
	// that first answered with it
	view := func(body map[string]any, status int, ids map[string]int, i int) string {
		id, _ := body["id"].(string)
		first, seen := ids[id]
		if id == "" {
			first = -1
		}
		if id != "" && !seen {
			ids[id], first = i, i
		}
		field, _ := body["field"].(string)
		if _, rest, ok := strings.Cut(field, "]"); ok && strings.HasPrefix(field, "[") {
			field = strings.TrimPrefix(rest, ".")
		}
		return fmt.Sprint(status, " id#", first, " ", body["state"], " ", body["depth"], "/", body["capacity"], " ",
			body["type"], " ", field, " ", body["violated-policies"], " eta:", body["eta"] != nil, " retry_at:", body["retry_at"] != nil,
			" retry_after:", body["retry_after"] != nil)
	}

	one := start(t, nil)
	singleIDs := map[string]int{}
	var single []string
	for i, s := range subs {
		r := one.do("POST", "/v1/messages", s)
		single = append(single, view(r.body, r.code, singleIDs, i))
	}

	other := start(t, nil)
	code, a := other.batch(t, "["+strings.Join(subs, ",")+"]")
	if code != 200 || len(a.Items) != len(subs) {
		t.Fatalf("batch: %d %+v", code, a)
	}
	batchIDs := map[string]int{}
	for i, it := range a.Items {
		status, _ := it["status"].(float64)
		if got := view(it, int(status), batchIDs, i); got != single[i] {
			t.Errorf("item %d: batch answered %s, alone %s", i, got, single[i])
		}
	}
}
