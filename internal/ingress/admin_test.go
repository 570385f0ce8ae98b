package ingress_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

func (e *env) admin(method, path, body string) reply {
	e.t.Helper()
	return e.do(method, path, body, "Authorization", "Bearer "+e.token)
}

func TestAdminTuneShowsAndResets(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for i := 0; i < 2; i++ {
		e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `1`))
	}
	e.do("POST", "/v1/messages", submit("orders", merchant("m-2"), `1`))

	q := e.admin("GET", "/v1/admin/queues/orders", "")
	if q.code != 200 || q.body["capacity"] != float64(3) || q.body["depth"] != float64(3) || q.body["active_keys"] != float64(2) || q.body["paused"] != false {
		t.Fatalf("queue: %d %s", q.code, q.raw)
	}
	if q.body["outflow"].(map[string]any)["requests_per_unit"] != float64(10) {
		t.Fatalf("outflow %v", q.body["outflow"])
	}
	list := e.admin("GET", "/v1/admin/queues", "")
	if qs, _ := list.body["queues"].([]any); list.code != 200 || len(qs) != 3 {
		t.Fatalf("list: %d %s", list.code, list.raw)
	}

	p := e.admin("PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"second","requests_per_unit":20},"capacity":5,"paused":true}`)
	if p.code != 200 || p.body["capacity"] != float64(5) || p.body["paused"] != true || p.body["outflow"].(map[string]any)["requests_per_unit"] != float64(20) {
		t.Fatalf("patch: %d %s", p.code, p.raw)
	}
	// The capacity change is a stream update: three more messages now fit for m-1, not four.
	for i := 0; i < 4; i++ {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `1`))
		want := 202
		if i == 3 {
			want = 429
		}
		if r.code != want {
			t.Fatalf("after capacity 5, message %d: %d %s", i+3, r.code, r.raw)
		}
		if i == 0 {
			wantHeaderInt(t, r.header, "X-RateLimit-Limit", 5)
		}
	}
	// GET shows the override (the watcher sees it within a second).
	if !waittest.Within(2*time.Second, func() bool {
		q = e.admin("GET", "/v1/admin/queues/orders", "")
		return q.body["capacity"] == float64(5) && q.body["paused"] == true
	}) {
		t.Fatalf("override not shown: %s", q.raw)
	}

	bad := e.admin("PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"fortnight","requests_per_unit":1}}`)
	if bad.code != 400 || bad.body["field"] != "outflow.unit" {
		t.Fatalf("bad patch: %d %s", bad.code, bad.raw)
	}
	if r := e.admin("PATCH", "/v1/admin/queues/nope", `{"paused":true}`); r.code != 404 {
		t.Fatalf("unknown queue: %d", r.code)
	}

	r := e.admin("PATCH", "/v1/admin/queues/orders", `{"reset":true}`)
	if r.code != 200 || r.body["capacity"] != float64(3) || r.body["paused"] != false {
		t.Fatalf("reset: %d %s", r.code, r.raw)
	}
}

func TestAdminKeyAndPurge(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	key := "shop/1 ü.*"
	e.do("POST", "/v1/messages", submit("orders", merchant(key), `1`))
	e.do("POST", "/v1/messages", submit("orders", merchant(key), `2`))
	path := "/v1/admin/queues/orders/keys/" + url.PathEscape(key)
	k := e.admin("GET", path, "")
	// The own engine (the default): the depth is the stream's, and the next slot is in the
	// owning drainer's memory, so null.
	if k.code != 200 || k.body["depth"] != float64(2) || k.body["key"] != key || k.body["next_dispatch_at"] != nil {
		t.Fatalf("key: %d %s", k.code, k.raw)
	}
	if r := e.admin("DELETE", path, ""); r.code != 204 {
		t.Fatalf("purge key: %d %s", r.code, r.raw)
	}
	if k := e.admin("GET", path, ""); k.body["depth"] != float64(0) {
		t.Fatalf("after purge: %s", k.raw)
	}
	// The key starts afresh: the depth count was reset with it.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant(key), `3`)); r.body["depth"] != float64(1) {
		t.Fatalf("after purge, submit: %s", r.raw)
	}
}

func TestAdminDeadLettersListAndReplay(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	_, js := natstest.Connect(t, e.nats.URL())
	set, err := rules.Parse("t.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	rule := set.Rule("orders")
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := queue.NewID("orders", "m-7")
	if err != nil {
		t.Fatal(err)
	}
	m := queue.Message{ID: id, Rule: "orders", Key: "m-7", Payload: []byte(`{"x":1}`),
		CreatedAt: time.Now(), Attempt: 8, LastError: "sink answered 500"}
	if err := dead.Dead(ctx, rule.Name, m, "max attempts reached"); err != nil {
		t.Fatal(err)
	}
	l := e.admin("GET", "/v1/admin/dead?queue=orders", "")
	msgs, _ := l.body["messages"].([]any)
	if l.code != 200 || len(msgs) != 1 {
		t.Fatalf("dead list: %d %s", l.code, l.raw)
	}
	d := msgs[0].(map[string]any)
	if d["id"] != m.ID || d["reason"] != "max attempts reached" || d["attempts"] != float64(8) || d["last_error"] != "sink answered 500" || d["state"] != "dead" {
		t.Fatalf("dead letter %v", d)
	}
	r := e.admin("POST", "/v1/admin/dead/"+m.ID+"/replay", "")
	if r.code != 202 || r.body["state"] != "queued" {
		t.Fatalf("replay: %d %s", r.code, r.raw)
	}
	// Back in the key's queue, and gone from the dead letters.
	k := e.admin("GET", "/v1/admin/queues/orders/keys/m-7", "")
	if k.body["depth"] != float64(1) {
		t.Fatalf("after replay: %s", k.raw)
	}
	if r := e.admin("POST", "/v1/admin/dead/"+m.ID+"/replay", ""); r.code != 404 {
		t.Fatalf("second replay: %d %s", r.code, r.raw)
	}
	if st := e.do("GET", "/v1/messages/"+m.ID, ""); st.code != 200 || st.body["state"] != "queued" {
		t.Fatalf("status after replay: %d %s", st.code, st.raw)
	}
}

// A replayed dead letter of an expired message goes back into its key's queue without
// its past expiry, so the drainer delivers it rather than dead-lettering it again as
// "expired" at once; a future expiry is kept.
func TestAdminReplayExpired(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	_, js := natstest.Connect(t, e.nats.URL())
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for key, expires := range map[string]time.Time{"m-past": time.Now().Add(-time.Minute), "m-future": future} {
		id, err := queue.NewID("orders", key)
		if err != nil {
			t.Fatal(err)
		}
		m := queue.Message{ID: id, Rule: "orders", Key: key, Payload: []byte(`{"x":1}`),
			CreatedAt: time.Now().Add(-time.Hour), ExpiresAt: expires}
		if err := dead.Dead(ctx, "orders", m, retry.ReasonExpired); err != nil {
			t.Fatal(err)
		}
		if r := e.admin("POST", "/v1/admin/dead/"+id+"/replay", ""); r.code != 202 || r.body["state"] != "queued" {
			t.Fatalf("replay %s: %d %s", key, r.code, r.raw)
		}
		p, err := qs.Pop(ctx, "orders", key)
		if err != nil {
			t.Fatalf("replayed %s not in its key's queue: %v", key, err)
		}
		switch {
		case p.ID != id:
			t.Errorf("%s: head is %s, want %s", key, p.ID, id)
		case key == "m-past" && (!p.ExpiresAt.IsZero() || p.Expired(time.Now())):
			t.Errorf("replayed expired message queued with ExpiresAt %v: the drainer would dead-letter it again; want none", p.ExpiresAt)
		case key == "m-future" && !p.ExpiresAt.Equal(future):
			t.Errorf("replayed message queued with ExpiresAt %v, want its future expiry %v kept", p.ExpiresAt, future)
		}
	}
}

// TestAdminConsoleAPI covers what the console reads beyond the first admin API: hottest
// keys, oldest age, refusals per second, the ETag of a GET and an If-Match of 0, and
// replaying every dead letter of a queue.
func TestAdminConsoleAPI(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for i, key := range []string{"hot", "hot", "hot", "warm", "warm", "cold"} {
		r := e.do("POST", "/v1/messages", submit("orders", [][2]string{{"merchant_id", key}}, `{"n":`+string(rune('0'+i))+`}`))
		if r.code != 202 {
			t.Fatalf("submit %d: %d %s", i, r.code, r.raw)
		}
	}
	// The fourth to "hot" is refused (capacity 3) and counted.
	if r := e.do("POST", "/v1/messages", submit("orders", [][2]string{{"merchant_id", "hot"}}, `1`)); r.code != 429 {
		t.Fatalf("over capacity: %d %s", r.code, r.raw)
	}
	h := e.admin("GET", "/v1/admin/queues/orders/keys?top=2", "")
	keys, _ := h.body["keys"].([]any)
	if h.code != 200 || len(keys) != 2 || h.body["complete"] != true {
		t.Fatalf("hot keys: %d %s", h.code, h.raw)
	}
	// Read from the stream's per-subject counts (the own engine keeps no depth counters);
	// the next slot is the owning drainer's, not known here.
	if k := keys[0].(map[string]any); k["key"] != "hot" || k["depth"] != float64(3) || k["next_dispatch_at"] != nil {
		t.Fatalf("hottest: %v", k)
	}
	if k := keys[1].(map[string]any); k["key"] != "warm" || k["depth"] != float64(2) {
		t.Fatalf("second: %v", k)
	}
	if r := e.admin("GET", "/v1/admin/queues/orders/keys?top=0", ""); r.code != 400 || r.body["field"] != "top" {
		t.Fatalf("top=0: %d %s", r.code, r.raw)
	}

	q := e.admin("GET", "/v1/admin/queues/orders", "")
	if age, ok := q.body["oldest_age_seconds"].(float64); !ok || age < 0 || age > 60 {
		t.Fatalf("oldest_age_seconds: %s", q.raw)
	}
	if q.header.Get("ETag") != `"0"` {
		t.Fatalf("ETag of an untuned queue: %q", q.header.Get("ETag"))
	}
	// Refusals reach Redis within a second and count for the minute after their bucket.
	var rate float64
	if !waittest.Within(15*time.Second, func() bool {
		q = e.admin("GET", "/v1/admin/queues/orders", "")
		rate, _ = q.body["refused_per_second"].(float64)
		return rate > 0
	}) {
		t.Fatalf("the refusal never showed: %s", q.raw)
	}
	if rate != 1.0/60 {
		t.Fatalf("refused_per_second %v, want one refusal over a minute", rate)
	}
	if r := e.admin("GET", "/v1/admin/queues/parking", ""); r.body["oldest_age_seconds"] != nil {
		t.Fatalf("an empty queue has an oldest age: %s", r.raw)
	}

	// If-Match: 0 (nothing overridden) applies once; the second writer with the same view
	// gets 412 and nothing changes.
	first := e.do("PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"second","requests_per_unit":5}}`, "Authorization", "Bearer "+e.token, "If-Match", "0")
	if first.code != 200 || first.header.Get("ETag") == `"0"` || first.header.Get("ETag") == "" {
		t.Fatalf("first PATCH: %d %s %v", first.code, first.raw, first.header)
	}
	second := e.do("PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"second","requests_per_unit":7}}`, "Authorization", "Bearer "+e.token, "If-Match", `"0"`)
	if second.code != 412 {
		t.Fatalf("second PATCH with a stale If-Match: %d %s", second.code, second.raw)
	}
	now := e.admin("GET", "/v1/admin/queues/orders", "")
	if now.header.Get("ETag") != first.header.Get("ETag") || now.raw == "" {
		t.Fatalf("ETag after the PATCH: %q, want %q", now.header.Get("ETag"), first.header.Get("ETag"))
	}
	if o := now.body["outflow"].(map[string]any); o["requests_per_unit"] != float64(5) {
		t.Fatalf("outflow after a refused PATCH: %v", o)
	}

	// Replay every dead letter of a queue.
	_, js := natstest.Connect(t, e.nats.URL())
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		m := queue.Message{ID: "0190c3a2-0000-7000-8000-00000000aa0" + string(rune('0'+i)), Rule: "orders", Key: "dead-" + string(rune('a'+i)),
			Payload: []byte(`1`), CreatedAt: time.Now(), Attempt: 8, LastError: "sink answered 500"}
		if err := dead.Dead(ctx, "orders", m, "max attempts reached"); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.admin("POST", "/v1/admin/dead/replay", ""); r.code != 400 || r.body["field"] != "queue" {
		t.Fatalf("replay all without a queue: %d %s", r.code, r.raw)
	}
	r := e.admin("POST", "/v1/admin/dead/replay?queue=orders", "")
	if r.code != 200 || r.body["replayed"] != float64(3) || r.body["kept"] != float64(0) {
		t.Fatalf("replay all: %d %s", r.code, r.raw)
	}
	if l := e.admin("GET", "/v1/admin/dead?queue=orders", ""); len(l.body["messages"].([]any)) != 0 {
		t.Fatalf("dead letters left: %s", l.raw)
	}
	if k := e.admin("GET", "/v1/admin/queues/orders/keys/dead-b", ""); k.body["depth"] != float64(1) {
		t.Fatalf("a replayed letter is not queued: %s", k.raw)
	}
}

func TestAdminRules(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	if r := e.do("GET", "/v1/admin/rules", ""); r.code != 401 {
		t.Fatalf("without the token: %d", r.code)
	}
	r := e.admin("GET", "/v1/admin/rules", "")
	list, _ := r.body["rules"].([]any)
	if r.code != 200 || len(list) != 5 {
		t.Fatalf("rules: %d %s", r.code, r.raw)
	}
	byName := map[string]map[string]any{}
	for _, x := range list {
		m := x.(map[string]any)
		byName[m["name"].(string)] = m
	}
	login := byName["auth_auth_type_login"]
	if login == nil || login["kind"] != "check" || login["domain"] != "auth" || !strings.Contains(login["source"].(string), "rules.yaml:") {
		t.Fatalf("login rule: %v", login)
	}
	if l := login["rate_limits"].([]any)[0].(map[string]any); l["algorithm"] != "fixed_window" || l["unit"] != "minute" || l["requests_per_unit"] != float64(2) || l["burst"] != nil {
		t.Fatalf("login limit: %v", l)
	}
	if h := byName["auth_auth_type_health"]; h == nil || h["unlimited"] != true {
		t.Fatalf("unlimited rule: %v", h)
	}
	m := byName["marketing"]
	if m["kind"] != "queue" || m["overflow"] != "park" || m["queue"].(map[string]any)["capacity"] != float64(50) {
		t.Fatalf("marketing: %v", m)
	}
	if d := m["descriptor"].([]any); len(d) != 2 || d[1].(map[string]any)["key"] != "user_id" || d[1].(map[string]any)["value"] != "" {
		t.Fatalf("marketing path: %v", d)
	}
}

// A refused PATCH names the field at fault once: in the problem's field member, with a
// detail that does not repeat it (nor the Go package's prefix), so `field: detail` — as
// the CLI and the client print it — reads "total_outflow: must be ≥ outflow (…)". Other
// problems of the same body follow, each with its own field.
func TestAdminPatchErrorNamesFieldOnce(t *testing.T) {
	t.Parallel()
	e := start(t, nil) // orders: outflow 10/s, no total_outflow
	if r := e.admin("PATCH", "/v1/admin/queues/orders", `{"total_outflow":{"unit":"second","requests_per_unit":50}}`); r.code != 200 {
		t.Fatalf("total_outflow 50/s: %d %s", r.code, r.raw)
	}
	for _, c := range []struct{ body, field, detail string }{
		{`{"total_outflow":{"unit":"second","requests_per_unit":5}}`, "total_outflow",
			"must be ≥ outflow (5/s < 10/s); change outflow too, or null it to use the rules file's"},
		{`{"outflow":{"unit":"second","requests_per_unit":100}}`, "outflow",
			"must be ≤ total_outflow (100/s > 50/s); change total_outflow too, or null it to use the rules file's"},
		{`{"outflow":{"unit":"second","requests_per_unit":20},"total_outflow":{"unit":"second","requests_per_unit":10}}`, "total_outflow",
			"must be ≥ outflow (10/s < 20/s): the whole rule cannot drain slower than one key"},
		{`{"capacity":0}`, "capacity", "must be ≥ 1 (got 0)"},
		{`{"capacity":0,"outflow":{"unit":"second","requests_per_unit":0}}`, "capacity",
			"must be ≥ 1 (got 0); outflow.requests_per_unit: must be ≥ 1 (got 0)"},
	} {
		r := e.admin("PATCH", "/v1/admin/queues/orders", c.body)
		if r.code != 400 || r.body["field"] != c.field || r.body["detail"] != c.detail {
			t.Errorf("PATCH %s: %d field %v detail %q; want 400 field %s detail %q", c.body, r.code, r.body["field"], r.body["detail"], c.field, c.detail)
		}
	}
}

// The overrides' ETag is a quoted entity-tag (RFC 9110), "0" with nothing overridden; a
// PATCH's If-Match takes it quoted, bare (as clients of the unquoted ETag give it back) or
// as *. After a reset, or a patch that leaves nothing overridden, the ETag is "0" again.
func TestAdminQueueETag(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	const path = "/v1/admin/queues/orders"
	patch := func(ifMatch, body string) reply {
		t.Helper()
		if ifMatch == "" {
			return e.admin("PATCH", path, body)
		}
		return e.do("PATCH", path, body, "Authorization", "Bearer "+e.token, "If-Match", ifMatch)
	}
	quoted := func(r reply) string {
		t.Helper()
		tag := r.header.Get("ETag")
		if len(tag) < 3 || tag[0] != '"' || tag[len(tag)-1] != '"' || strings.Trim(tag, `"0123456789`) != "" {
			t.Fatalf("ETag %q is not a quoted revision (%d %s)", tag, r.code, r.raw)
		}
		return tag
	}
	if g := e.admin("GET", path, ""); quoted(g) != `"0"` {
		t.Fatalf("ETag of an untuned queue: %q", g.header.Get("ETag"))
	}

	// Quoted, as the ETag is sent.
	p1 := patch(`"0"`, `{"capacity":4}`)
	if p1.code != 200 || quoted(p1) == `"0"` {
		t.Fatalf("PATCH If-Match \"0\": %d %s", p1.code, p1.raw)
	}
	if g := e.admin("GET", path, ""); g.header.Get("ETag") != p1.header.Get("ETag") {
		t.Fatalf("GET ETag %q after PATCH %q", g.header.Get("ETag"), p1.header.Get("ETag"))
	}
	// Bare, as a client of the unquoted ETag gives it back.
	p2 := patch(strings.Trim(p1.header.Get("ETag"), `"`), `{"capacity":5}`)
	if p2.code != 200 || quoted(p2) == p1.header.Get("ETag") {
		t.Fatalf("PATCH with the bare revision: %d %s", p2.code, p2.raw)
	}
	// Stale, quoted or bare: 412, nothing changes.
	for _, stale := range []string{p1.header.Get("ETag"), strings.Trim(p1.header.Get("ETag"), `"`), `"0"`} {
		if r := patch(stale, `{"capacity":6}`); r.code != 412 {
			t.Fatalf("PATCH with stale If-Match %s: %d %s", stale, r.code, r.raw)
		}
	}
	// *: whatever the revision.
	p3 := patch("*", `{"capacity":7}`)
	if p3.code != 200 || p3.body["capacity"] != float64(7) || quoted(p3) == p2.header.Get("ETag") {
		t.Fatalf("PATCH If-Match *: %d %s", p3.code, p3.raw)
	}
	// Not an entity-tag of this resource: 400 naming If-Match.
	for _, bad := range []string{`W/` + p3.header.Get("ETag"), `"1", "2"`, `"` + strings.Trim(p3.header.Get("ETag"), `"`), "abc", "-1"} {
		if r := patch(bad, `{"capacity":8}`); r.code != 400 || r.body["field"] != "If-Match" {
			t.Fatalf("PATCH If-Match %s: %d %s", bad, r.code, r.raw)
		}
	}

	// Nothing overridden any more (the only field nulled, or a reset): "0" again, on the
	// PATCH and on the next GET; and "0" then matches as for a queue never tuned.
	if r := patch(p3.header.Get("ETag"), `{"capacity":null}`); r.code != 200 || quoted(r) != `"0"` {
		t.Fatalf("PATCH nulling the last override: %d ETag %q %s", r.code, r.header.Get("ETag"), r.raw)
	}
	if g := e.admin("GET", path, ""); quoted(g) != `"0"` {
		t.Fatalf("GET after the last override went: ETag %q", g.header.Get("ETag"))
	}
	p4 := patch(`"0"`, `{"paused":true}`)
	if p4.code != 200 || quoted(p4) == `"0"` {
		t.Fatalf("PATCH If-Match \"0\" after the overrides went: %d %s", p4.code, p4.raw)
	}
	// A reset with a stale If-Match is refused like any patch: someone changed the queue
	// since the caller read it, and the reset would undo what they did unseen.
	if r := patch(`"1"`, `{"reset":true}`); r.code != 412 {
		t.Fatalf("reset with a stale If-Match: %d %s", r.code, r.raw)
	}
	if g := e.admin("GET", path, ""); g.body["paused"] != true {
		t.Fatalf("a refused reset changed the queue: %s", g.raw)
	}
	if r := patch(p4.header.Get("ETag"), `{"reset":true}`); r.code != 200 || quoted(r) != `"0"` || r.body["paused"] != false {
		t.Fatalf("reset: %d ETag %q %s", r.code, r.header.Get("ETag"), r.raw)
	}
	if g := e.admin("GET", path, ""); quoted(g) != `"0"` {
		t.Fatalf("GET after a reset: ETag %q", g.header.Get("ETag"))
	}
}

// TestAdminKeysClaimEngine: with -engine claim the hottest keys and a key's next dispatch
// time come from the scheduler's counters and due times, as before the own engine.
func TestAdminKeysClaimEngine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-engine", "claim")
	for _, key := range []string{"hot", "hot", "warm"} {
		if r := e.do("POST", "/v1/messages", submit("orders", merchant(key), `1`), "Prefer", ""); r.code != 202 || r.body["depth"] == nil {
			t.Fatalf("submit: %d %s (the claim engine answers depth unasked)", r.code, r.raw)
		}
	}
	h := e.admin("GET", "/v1/admin/queues/orders/keys?top=1", "")
	keys, _ := h.body["keys"].([]any)
	if h.code != 200 || len(keys) != 1 {
		t.Fatalf("hot keys: %d %s", h.code, h.raw)
	}
	if k := keys[0].(map[string]any); k["key"] != "hot" || k["depth"] != float64(2) || k["next_dispatch_at"] == nil {
		t.Fatalf("hottest: %v", k)
	}
	if k := e.admin("GET", "/v1/admin/queues/orders/keys/warm", ""); k.body["depth"] != float64(1) || k.body["next_dispatch_at"] == nil {
		t.Fatalf("key: %d %s", k.code, k.raw)
	}
}
