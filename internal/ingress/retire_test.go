package ingress_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// Removing a queue rule from the rules file makes its waiting messages dead letters with
// reason "rule removed" — those queued in its keys' queues and those parked or scheduled
// in the retry stream — counted in sluice_rule_removed_messages_total; its stream is
// deleted, and so is its override: the rule added back starts from its rules file, not
// paused as its old override said. Its dead letters can be replayed into it. An in-process
// drainer runs throughout, as in `sluice dev`.
func TestRemovingARuleDeadLettersItsMessagesAndForgetsItsOverride(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-rules-poll", "20ms", "-drain")

	// "parking" (capacity 1, overflow park): m-1's first order is queued, its second
	// parked; m-2's is queued; m-3's is scheduled an hour ahead.
	var ids []string
	for _, s := range []string{
		submit("parking", merchant("m-1"), `1`), submit("parking", merchant("m-1"), `2`),
		submit("parking", merchant("m-2"), `3`), submit("parking", merchant("m-3"), `4`, "delay", "1h"),
	} {
		r := e.do("POST", "/v1/messages", s)
		if r.code != 202 {
			t.Fatalf("submit: %d %s", r.code, r.raw)
		}
		ids = append(ids, r.body["id"].(string))
	}
	if r := e.admin("PATCH", "/v1/admin/queues/parking", `{"paused":true}`); r.code != 200 || r.body["paused"] != true {
		t.Fatalf("pause: %d %s", r.code, r.raw)
	}
	// Untouched by the removal: another rule's message.
	if r := e.do("POST", "/v1/messages", submit("orders", merchant("m-9"), `9`)); r.code != 202 {
		t.Fatalf("submit orders: %d %s", r.code, r.raw)
	}

	without := strings.Replace(testRules, `---
domain: parking
descriptors:
  - key: merchant_id
    name: parking
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 2}}
    overflow: park
    sink: {url: "http://127.0.0.1:1/unused"}
`, "", 1)
	if without == testRules {
		t.Fatal("the test's rules no longer have the parking rule as written here")
	}
	if err := os.WriteFile(path, []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	type dead struct {
		ID, Rule, Reason string
	}
	var got map[string]dead
	waittest.Eventually(t, 10*time.Second, "the removed rule's 4 messages dead", func() bool {
		r := e.admin("GET", "/v1/admin/dead?limit=100", "")
		got = map[string]dead{}
		for _, m := range r.body["messages"].([]any) {
			m := m.(map[string]any)
			got[m["id"].(string)] = dead{ID: m["id"].(string), Rule: m["rule"].(string), Reason: m["reason"].(string)}
		}
		return len(got) >= 4
	})
	for _, id := range ids {
		if d, ok := got[id]; !ok || d.Rule != "parking" || d.Reason != "rule removed" {
			t.Fatalf("message %s: dead letter %+v (present %v), want rule parking, reason \"rule removed\"; all: %+v", id, d, ok, got)
		}
	}
	if len(got) != 4 {
		t.Fatalf("%d dead letters, want the removed rule's 4: %+v", len(got), got)
	}
	// The parked and the scheduled one: 2 from the retry stream, unless the parked one's
	// schedule fired just then (the re-admitter dead-letters it, uncounted here). The counts
	// are added once the whole rule is retired, which may be just after its dead letters show.
	wants := []string{`sluice_rule_removed_messages_total{from="queue",rule="parking"} 2`, `sluice_rule_removed_messages_total{from="retry",rule="parking"} `}
	var metrics string
	if !waittest.Within(5*time.Second, func() bool {
		metrics = e.do("GET", "/metrics", "").raw
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				return false
			}
		}
		return true
	}) {
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	// Its stream is gone (it no longer reserves room in the store); the other rule's message stays.
	_, js := natstest.Connect(t, e.nats.URL())
	ctx := context.Background()
	waittest.Eventually(t, 5*time.Second, "the removed rule's stream deleted", func() bool {
		_, err := js.Stream(ctx, "SLUICE_Q_parking")
		return errors.Is(err, jetstream.ErrStreamNotFound)
	})
	if q := e.admin("GET", "/v1/admin/queues/orders", ""); q.code != 200 || q.body["depth"] != float64(1) {
		t.Fatalf("orders after another rule's removal: %d %s", q.code, q.raw)
	}

	// Added back: as its rules file says, not paused by the old override; its dead letters replay into it.
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	var q reply
	waittest.Eventually(t, 10*time.Second, "the rule added back", func() bool {
		q = e.admin("GET", "/v1/admin/queues/parking", "")
		return q.code == 200
	})
	if q.body["paused"] != false || q.body["overridden"] != nil && len(q.body["overridden"].([]any)) != 0 {
		t.Fatalf("the rule added back: %s; want it unpaused, with no override", q.raw)
	}
	if r := e.admin("POST", "/v1/admin/dead/"+ids[2]+"/replay", ""); r.code != 202 {
		t.Fatalf("replay into the rule added back: %d %s", r.code, r.raw)
	}
	// In its queue again, which the in-process drainer delivers (to a sink that refuses).
	if st := e.do("GET", "/v1/messages/"+ids[2], ""); st.code != 200 || st.body["state"] == "dead" {
		t.Fatalf("the replayed message: %d %s", st.code, st.raw)
	}
}
