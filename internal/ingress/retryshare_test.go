package ingress_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/waittest"
)

// One tenant cannot block every tenant's scheduling (issue #32): marketing schedules 16 KiB
// messages for ever more users into a 1 MiB retry stream until it holds its share
// (-retry-rule-share 25) and is refused with 429 #quota-exceeded naming its rule, its parks
// too; orders' schedules are still accepted. Before, the flood filled the shared stream and every rule's
// schedules got 503.
func TestOneRuleCannotFillTheRetryStream(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-retry-max-bytes", "1MiB", "-retry-rule-share", "25")
	payload := `{"blob":"` + strings.Repeat("x", 16<<10) + `"}`
	refused := -1
	for i := range 80 {
		r := e.do("POST", "/v1/messages", submit("messaging", [][2]string{{"message_type", "marketing"}, {"user_id", "u-" + strconv.Itoa(i)}}, payload, "delay", "1h"))
		if r.code == 202 && r.body["state"] == "scheduled" {
			continue
		}
		if r.code != 429 || !strings.HasSuffix(r.body["type"].(string), "#quota-exceeded") || !strings.Contains(r.body["detail"].(string), "-retry-rule-share") {
			t.Fatalf("marketing's schedule %d: %d %s; want 202 or the rule's 429", i, r.code, r.raw)
		}
		if vp, _ := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "marketing" {
			t.Errorf("violated-policies %v, want [marketing]", r.body["violated-policies"])
		}
		refused = i
		break
	}
	// A quarter of 95% of 1 MiB is ~15 messages of 16 KiB.
	if refused < 8 || refused > 20 {
		t.Fatalf("marketing was refused at its schedule %d, want about 15", refused)
	}
	// A message of the same size marketing would park (over its rate limit of 2 a minute,
	// overflow: park) is refused too: parks count against the same share. (A much smaller
	// one may still be parked: the rule's bytes are its messages × the stream's mean size.)
	user := [][2]string{{"message_type", "marketing"}, {"user_id", "u-park"}}
	for i := range 3 {
		r := e.do("POST", "/v1/messages", submit("messaging", user, payload))
		if i < 2 && (r.code != 202 || r.body["state"] != "queued") {
			t.Fatalf("marketing's message %d within its rate limit: %d %s", i, r.code, r.raw)
		}
		if i == 2 && (r.code != 429 || !strings.HasSuffix(r.body["type"].(string), "#quota-exceeded")) {
			t.Fatalf("marketing's message over its rate limit, to be parked while the rule holds its share: %d %s, want 429", r.code, r.raw)
		}
	}
	for i := range 3 {
		r := e.do("POST", "/v1/messages", submit("orders", merchant("m-"+strconv.Itoa(i)), `{"n":1}`, "delay", "1h"))
		if r.code != 202 || r.body["state"] != "scheduled" {
			t.Fatalf("orders' schedule %d while marketing holds its share: %d %s", i, r.code, r.raw)
		}
	}
}

// The same flood with -retry-rule-share 100 (no per-rule bound, as before issue #32):
// marketing fills the whole retry stream and orders' schedule is refused with 503 — what
// TestOneRuleCannotFillTheRetryStream shows no longer happens by default.
func TestRetryStreamWithoutRuleShare(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-retry-max-bytes", "1MiB", "-retry-rule-share", "100")
	payload := `{"blob":"` + strings.Repeat("x", 16<<10) + `"}`
	// The stream's fullness is read at most once a second: schedule one more message each
	// time the wait polls, until the whole stream refuses (503).
	i := 0
	waittest.Eventually(t, 15*time.Second, "marketing filled the retry stream", func() bool {
		i++
		r := e.do("POST", "/v1/messages", submit("messaging", [][2]string{{"message_type", "marketing"}, {"user_id", "u-" + strconv.Itoa(i)}}, payload, "delay", "1h"))
		if r.code != 202 && r.code != 503 {
			t.Fatalf("marketing's schedule %d: %d %s", i, r.code, r.raw)
		}
		return r.code == 503
	})
	// The stream's fullness is read at most once a second: wait for orders to see it.
	waittest.Eventually(t, 5*time.Second, "orders refused once marketing filled the stream", func() bool {
		return e.do("POST", "/v1/messages", submit("orders", merchant("m-1"), `{"n":1}`, "delay", "1h")).code == 503
	})
}
