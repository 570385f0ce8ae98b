package ingress_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/sluice-io/sluice/queue"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// commandCalls reads INFO commandstats: calls per command (without "cmdstat_").
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// commandsBetween is what Redis ran between two commandstats readings, without the INFO
// commands that read them.
func commandsBetween(before, after map[string]int64) (total int64, by map[string]int64) {
	by = map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			by[name] = d
			total += d
		}
	}
	return total, by
}

// startAdmissionIngress starts an ingress (engine as given, "" = the default) on a private
// redis-server with two queue rules: plain (no admission limit) and limited (2 a minute per
// key, refused beyond).
func startAdmissionIngress(t *testing.T, engine string) (base string, rdb *redis.Client) {
	t.Helper()
	base, rdb, _ = startAdmissionIngressOn(t, engine)
	return base, rdb
}

// startAdmissionIngressOn is startAdmissionIngress, also giving the URL of its NATS server.
func startAdmissionIngressOn(t *testing.T, engine string) (base string, rdb *redis.Client, natsURL string) {
	t.Helper()
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(path, []byte(`
domain: plain
descriptors:
  - key: merchant_id
    name: plain
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: limited
descriptors:
  - key: merchant_id
    name: limited
    rate_limit: {unit: minute, requests_per_unit: 2}
    queue: {capacity: 1000, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	args := []string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", n.URL(), "-redis", r.URL()}
	if engine != "" {
		args = append(args, "-engine", engine)
	}
	cfg, err := ingress.ParseFlags(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	rdb = r.Client(t)
	return "http://" + m.Addr.String(), rdb, n.URL()
}

func postJSON(t *testing.T, url, body string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func submission(domain string, i int) string {
	return fmt.Sprintf(`{"domain":%q,"descriptor":[{"key":"merchant_id","value":"m-%d"}],"payload":{"n":%d}}`, domain, i%50, i)
}

// TestPlainAdmissionSendsNoRedisCommand: under the own engine (the default), admitting a
// message of a queue rule without an admission limit and without an idempotency key is one
// JetStream publish: N single submissions and N messages in batches through the real HTTP
// ingress cost Redis 0 commands (INFO commandstats of a private redis-server before and
// after). An idle ingress sends Redis nothing either (its clock-driven work writes only
// when there is something to write, e.g. refusals), so the count is exactly 0.
func TestPlainAdmissionSendsNoRedisCommand(t *testing.T) {
	base, rdb := startAdmissionIngress(t, "")
	const n = 300
	// The first admission of a rule may load things once (the stream handle): not counted.
	if resp, b := postJSON(t, base+"/v1/messages", submission("plain", 0), nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("warm-up: %d %s", resp.StatusCode, b)
	}
	before := commandCalls(t, rdb)
	for i := range n {
		resp, b := postJSON(t, base+"/v1/messages", submission("plain", i), nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("single %d: %d %s", i, resp.StatusCode, b)
		}
		if i == 0 {
			var body map[string]any
			json.Unmarshal(b, &body)
			if _, ok := body["depth"]; ok || body["state"] != "queued" || body["capacity"] != 1000.0 {
				t.Errorf("202 without Prefer: %s, want state queued, capacity and no depth", b)
			}
			if h := resp.Header.Get("Location"); !strings.HasPrefix(h, "/v1/messages/") {
				t.Errorf("Location %q", h)
			}
		}
	}
	singles := commandCalls(t, rdb)
	for i := 0; i < n; i += 100 {
		items := make([]string, 0, 100)
		for j := range 100 {
			items = append(items, submission("plain", i+j))
		}
		resp, b := postJSON(t, base+"/v1/messages", "["+strings.Join(items, ",")+"]", nil)
		var out struct{ Accepted int }
		if json.Unmarshal(b, &out); resp.StatusCode != http.StatusOK || out.Accepted != 100 {
			t.Fatalf("batch: %d %s", resp.StatusCode, b)
		}
	}
	batches := commandCalls(t, rdb)
	single, bySingle := commandsBetween(before, singles)
	batch, byBatch := commandsBetween(singles, batches)
	t.Logf("Redis commands: %d single submissions %d %v; %d messages in batches %d %v", n, single, bySingle, n, batch, byBatch)
	if single != 0 || batch != 0 {
		t.Errorf("Redis commands per admission of a plain queue rule: singles %d for %d (%v), batches %d for %d (%v); want 0",
			single, n, bySingle, batch, n, byBatch)
	}
}

// TestLimitedAdmissionStillEnforcedWithoutDueMarks: a rule with an admission limit keeps
// its Redis step under the own engine: 2 a minute per key admits two and refuses the
// third (429 naming the limit), single and in a batch.
func TestLimitedAdmissionStillEnforcedWithoutDueMarks(t *testing.T) {
	base, rdb := startAdmissionIngress(t, "")
	before := commandCalls(t, rdb)
	body := `{"domain":"limited","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{}}`
	for i := range 3 {
		resp, b := postJSON(t, base+"/v1/messages", body, nil)
		want := http.StatusAccepted
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("single %d: %d %s, want %d", i+1, resp.StatusCode, b, want)
		}
		if i < 2 && resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("single %d: no RateLimit-Policy: the admission limit's numbers are known", i+1)
		}
	}
	if total, _ := commandsBetween(before, commandCalls(t, rdb)); total < 3 {
		t.Errorf("%d Redis commands for 3 limited admissions: the limit is decided in Redis", total)
	}
	item := `{"domain":"limited","descriptor":[{"key":"merchant_id","value":"m-2"}],"payload":{}}`
	resp, b := postJSON(t, base+"/v1/messages", "["+item+","+item+","+item+"]", nil)
	var out struct {
		Accepted, Refused int
		Items             []struct{ Status int }
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %d %s", resp.StatusCode, b)
	}
	if out.Accepted != 2 || out.Refused != 1 || out.Items[2].Status != http.StatusTooManyRequests {
		t.Errorf("batch of 3 under 2 a minute: %s, want 2 accepted and the third 429", b)
	}
}

// TestPreferDepth: a submission that asks for its key's depth (Prefer:
// return=representation) gets depth and eta in its 202 under the own engine, read from the
// stream: depth counts the messages of the key, this one included; eta is depth − 1
// outflow intervals ahead; Preference-Applied says so. Batches too.
func TestPreferDepth(t *testing.T) {
	base, rdb := startAdmissionIngress(t, "")
	prefer := http.Header{"Prefer": {"respond-async, return=representation"}}
	body := `{"domain":"plain","descriptor":[{"key":"merchant_id","value":"deep"}],"payload":{}}`
	before := commandCalls(t, rdb)
	for i := 1; i <= 3; i++ {
		start := time.Now()
		resp, b := postJSON(t, base+"/v1/messages", body, prefer)
		var got struct {
			Depth, Capacity int64
			ETA             time.Time
		}
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submit %d: %d %s", i, resp.StatusCode, b)
		}
		if got.Depth != int64(i) || got.Capacity != 1000 {
			t.Errorf("submit %d: %s, want depth %d", i, b, i)
		}
		// 1 a second: this message leaves i − 1 seconds from the admission.
		if want := start.Add(time.Duration(i-1) * time.Second); got.ETA.Before(want.Add(-time.Second)) || got.ETA.After(time.Now().Add(time.Duration(i-1)*time.Second)) {
			t.Errorf("submit %d: eta %s, want about %s", i, got.ETA, want)
		}
		if h := resp.Header.Get("Preference-Applied"); h != "return=representation" {
			t.Errorf("submit %d: Preference-Applied %q", i, h)
		}
		if h := resp.Header.Get("X-RateLimit-Remaining"); h != strconv.Itoa(1000-i) {
			t.Errorf("submit %d: X-RateLimit-Remaining %q, want %d", i, h, 1000-i)
		}
	}
	if total, by := commandsBetween(before, commandCalls(t, rdb)); total > 3 {
		t.Errorf("depth asked for: %d Redis commands (%v); it is read from the stream", total, by)
	}
	resp, b := postJSON(t, base+"/v1/messages", "["+body+","+body+"]", prefer)
	var out struct {
		Items []struct{ Depth int64 }
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Items) != 2 {
		t.Fatalf("batch: %d %s", resp.StatusCode, b)
	}
	if out.Items[0].Depth < 4 || out.Items[1].Depth != 5 {
		t.Errorf("batch with Prefer: %s, want depths 4 (or 5) and 5", b)
	}
	// Without the preference: no depth, no eta, no Preference-Applied.
	resp, b = postJSON(t, base+"/v1/messages", body, nil)
	if strings.Contains(string(b), `"depth"`) || strings.Contains(string(b), `"eta"`) || resp.Header.Get("Preference-Applied") != "" {
		t.Errorf("without Prefer: %s %v", b, resp.Header)
	}
}

// TestClaimEngineAdmissionKeepsDueMarks: with -engine claim the ingress still counts and
// marks in Redis for every admission (the claim drainers learn of work from it), and the
// 202 carries depth and eta unasked.
func TestClaimEngineAdmissionKeepsDueMarks(t *testing.T) {
	base, rdb := startAdmissionIngress(t, "claim")
	before := commandCalls(t, rdb)
	var body struct{ Depth int64 }
	for i := 1; i <= 3; i++ {
		resp, b := postJSON(t, base+"/v1/messages", `{"domain":"plain","descriptor":[{"key":"merchant_id","value":"c"}],"payload":{}}`, nil)
		if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != http.StatusAccepted || body.Depth != int64(i) {
			t.Fatalf("submit %d: %d %s, want depth %d", i, resp.StatusCode, b, i)
		}
	}
	if total, by := commandsBetween(before, commandCalls(t, rdb)); total < 3 {
		t.Errorf("claim engine: %d Redis commands for 3 admissions (%v), want the counts and marks", total, by)
	}
}

// TestStoredFormFollowsTheEngine: under the own engine a submission — single or in a batch
// — is stored in the lean form (Sluice-Format 3, no Sluice-Rule, Sluice-Key or
// Sluice-Created-At); under -engine claim, which v0.3 drainers may still read beside, in
// the full form (format 2). Read straight from the rule's stream.
func TestStoredFormFollowsTheEngine(t *testing.T) {
	for _, tc := range []struct {
		engine, format string
		lean           bool
	}{{"", "3", true}, {"claim", "2", false}} {
		t.Run("engine="+cmp.Or(tc.engine, "own"), func(t *testing.T) {
			base, _, natsURL := startAdmissionIngressOn(t, tc.engine)
			if resp, b := postJSON(t, base+"/v1/messages", `{"domain":"plain","descriptor":[{"key":"merchant_id","value":"f"}],"payload":{"n":1}}`, nil); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("single: %d %s", resp.StatusCode, b)
			}
			if resp, b := postJSON(t, base+"/v1/messages", `[{"domain":"plain","descriptor":[{"key":"merchant_id","value":"f"}],"payload":{"n":2}}]`, nil); resp.StatusCode/100 != 2 {
				t.Fatalf("batch: %d %s", resp.StatusCode, b)
			}
			_, js := natstest.Connect(t, natsURL)
			q, err := queue.NewQueues(js, queue.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			s, err := js.Stream(ctx, q.StreamName("plain"))
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 2; seq++ {
				raw, err := s.GetMsg(ctx, seq)
				if err != nil {
					t.Fatalf("seq %d: %v", seq, err)
				}
				if got := raw.Header.Get(queue.HeaderFormat); got != tc.format {
					t.Errorf("seq %d: Sluice-Format %q, want %s", seq, got, tc.format)
				}
				if has := raw.Header.Get(queue.HeaderKey) != ""; has == tc.lean {
					t.Errorf("seq %d: Sluice-Key present %v, want %v (headers %v)", seq, has, !tc.lean, raw.Header)
				}
			}
		})
	}
}
