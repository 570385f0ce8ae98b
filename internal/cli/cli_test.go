package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
)

// The command against the real thing: an ingress (ingress.Main, as cmd/ingress runs it)
// with an in-process drainer, a real NATS server, a real Redis and a recording sink. Each
// test runs cli.Main with arguments, as a shell would, and reads its output and exit code.

const token = "cli-test-token-0123"

// testRules: SINK is replaced by the recording sink's URL. "orders" is paused by the
// tests that need messages to stay; "fragile" dies at once (its sink answers 422).
const testRules = `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 10}}
    overflow: reject
    sink: {url: "SINK/orders", timeout: 5s}
---
domain: fragile
descriptors:
  - key: k
    name: fragile
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 50}}
    sink: {url: "SINK/fragile", timeout: 5s}
---
domain: login
descriptors:
  - key: user
    name: login
    rate_limit: {unit: minute, requests_per_unit: 3}
`

type system struct {
	url  string
	sink *sinktest.Sink
}

func start(t *testing.T, extra ...string) *system {
	t.Helper()
	return startRules(t, testRules, extra...)
}

// startRules is start with rules of the test's own (SINK is the recording sink's URL).
func startRules(t *testing.T, ruleText string, extra ...string) *system {
	t.Helper()
	sink := sinktest.Start(t)
	sink.Answer(func(d sinktest.Delivery) (int, string) {
		if d.Rule == "fragile" {
			return http.StatusUnprocessableEntity, ""
		}
		return http.StatusOK, ""
	})
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(ruleText, "SINK", sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags(append([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-status-keep", "1h", "-shutdown-timeout", "2s", "-admin-token", token}, extra...),
		func(string) string { return "" }, io.Discard)
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
	return &system{url: "http://" + m.Addr.String(), sink: sink}
}

// run is one command line's outcome.
type run struct {
	code           int
	stdout, stderr string
}

// opts change one run: its stdin, whether it is on a terminal, its HTTP client.
type opts struct {
	stdin    string
	terminal bool
	env      map[string]string
	hc       *http.Client
}

// sluice runs the command with SLUICE_URL and SLUICE_ADMIN_TOKEN set for s (o.env wins).
func (s *system) sluice(t *testing.T, o opts, args ...string) run {
	t.Helper()
	env := map[string]string{"SLUICE_URL": s.url, "SLUICE_ADMIN_TOKEN": token}
	for k, v := range o.env {
		env[k] = v
	}
	var out, errOut bytes.Buffer
	m := &cli.Main{
		Stdin: strings.NewReader(o.stdin), Stdout: &out, Stderr: &errOut,
		Getenv:     func(k string) string { return env[k] },
		Terminal:   func() bool { return o.terminal },
		HTTPClient: o.hc,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := m.Run(ctx, args)
	return run{code: code, stdout: out.String(), stderr: errOut.String()}
}

// must fails the test unless the run exited with code and its outputs contain the
// strings. CLI_SHOW=1 logs every run, to see what a person sees.
func (r run) must(t *testing.T, code int, inStdout, inStderr string) run {
	if os.Getenv("CLI_SHOW") != "" {
		t.Logf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Helper()
	if r.code != code || !strings.Contains(r.stdout, inStdout) || !strings.Contains(r.stderr, inStderr) {
		t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant %q in stdout, %q in stderr", r.code, code, r.stdout, r.stderr, inStdout, inStderr)
	}
	return r
}

func (r run) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
}

func TestOperatorVerbs(t *testing.T) {
	t.Parallel()
	s := start(t)

	t.Run("queues", func(t *testing.T) {
		r := s.sluice(t, opts{}, "queues").must(t, 0, "NAME", "")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[1], "fragile ") && !strings.HasPrefix(lines[2], "fragile ") {
			t.Fatalf("table:\n%s", r.stdout)
		}
		// Aligned: every row's OUTFLOW column starts where its header does.
		col := strings.Index(lines[0], "OUTFLOW")
		for _, l := range lines[1:] {
			if !strings.Contains(l[col:], "/s") || l[col-1] != ' ' {
				t.Fatalf("not aligned at column %d:\n%s", col, r.stdout)
			}
		}
		var v struct {
			Queues []struct {
				Name     string `json:"name"`
				Capacity int64  `json:"capacity"`
			} `json:"queues"`
		}
		s.sluice(t, opts{}, "queues", "-o", "json").must(t, 0, "", "").json(t, &v)
		if len(v.Queues) != 2 || v.Queues[0].Name != "orders" || v.Queues[0].Capacity != 50 {
			t.Fatalf("%+v", v)
		}
	})

	t.Run("rules", func(t *testing.T) {
		r := s.sluice(t, opts{}, "rules").must(t, 0, "login", "")
		if !strings.Contains(r.stdout, "3/m fixed_window") && !strings.Contains(r.stdout, "3/m") {
			t.Fatalf("rules:\n%s", r.stdout)
		}
		var v struct {
			Rules []client.Rule `json:"rules"`
		}
		s.sluice(t, opts{}, "rules", "-o", "json").must(t, 0, "", "").json(t, &v)
		if len(v.Rules) != 3 || v.Rules[2].Name != "login" || v.Rules[2].Kind != "check" || v.Rules[0].Kind != "queue" {
			t.Fatalf("%+v", v.Rules)
		}
	})

	t.Run("tune, pause, resume", func(t *testing.T) {
		s.sluice(t, opts{}, "tune", "orders", "5/s").must(t, 0, "5/s  (rules file: 10/s)", "")
		var q struct {
			Outflow    client.Rate `json:"outflow"`
			Capacity   int64       `json:"capacity"`
			Paused     bool        `json:"paused"`
			ETag       string      `json:"etag"`
			Overridden []string    `json:"overridden"`
		}
		s.sluice(t, opts{}, "queue", "orders", "-o", "json").must(t, 0, "", "").json(t, &q)
		if q.Outflow.RequestsPerUnit != 5 || q.Outflow.Unit != "second" || q.ETag == "" || q.ETag == "0" {
			t.Fatalf("after tune: %+v", q)
		}
		s.sluice(t, opts{}, "tune", "orders", "--capacity", "40", "--total-outflow", "600/m").must(t, 0, "40  (rules file: 50)", "")
		s.sluice(t, opts{}, "pause", "orders").must(t, 0, "paused         yes", "")
		s.sluice(t, opts{}, "resume", "orders").must(t, 0, "paused         no", "")
		s.sluice(t, opts{}, "tune", "orders", "--reset").must(t, 0, "overridden     -", "")
		s.sluice(t, opts{}, "tune", "orders").must(t, 2, "", "nothing to change")
		s.sluice(t, opts{}, "tune", "orders", "5/fortnight").must(t, 2, "", "not a unit")
		s.sluice(t, opts{}, "tune", "nope", "5/s").must(t, 1, "", `no queue rule named "nope"; the queue rules are: orders, fragile`)
	})

	// Two operators: the command reads the queue (its ETag) and someone else changes it
	// before the command's PATCH arrives. The change is refused, not overwritten.
	t.Run("tune refused when changed since read", func(t *testing.T) {
		other, err := client.New(s.url, client.WithAdminToken(token))
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch {
				once.Do(func() {
					capacity := int64(33)
					if _, err := other.Admin().Tune(r.Context(), "orders", client.Patch{Capacity: &capacity}); err != nil {
						t.Errorf("the other operator: %v", err)
					}
				})
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
		s.sluice(t, opts{hc: hc}, "tune", "orders", "7/s").must(t, 1, "",
			"queue orders was changed by someone else since you read it; run `sluice queue orders` and retry")
		var q struct {
			Outflow  client.Rate `json:"outflow"`
			Capacity int64       `json:"capacity"`
		}
		s.sluice(t, opts{}, "queue", "orders", "-o", "json").must(t, 0, "", "").json(t, &q)
		if q.Capacity != 33 || q.Outflow.RequestsPerUnit != 10 {
			t.Fatalf("the other operator's change was overwritten: %+v", q)
		}
		// --force is the explicit "last writer wins".
		s.sluice(t, opts{hc: hc}, "tune", "orders", "7/s", "--force").must(t, 0, "7/s", "")
		s.sluice(t, opts{}, "tune", "orders", "--reset").must(t, 0, "", "")
	})

	t.Run("submit, status, keys, purge", func(t *testing.T) {
		s.sluice(t, opts{}, "pause", "orders").must(t, 0, "", "")
		defer s.sluice(t, opts{}, "resume", "orders")
		payload := filepath.Join(t.TempDir(), "order.json")
		if err := os.WriteFile(payload, []byte(`{"order":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
		var sub struct {
			ID             string `json:"id"`
			State          string `json:"state"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-1", "--payload", "@"+payload, "-o", "json",
			"--idempotency-key", "order-1").must(t, 0, "", "").json(t, &sub)
		if sub.ID == "" || sub.State != "queued" || sub.IdempotencyKey != "order-1" {
			t.Fatalf("%+v", sub)
		}
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-1", "--payload", `{"order":1}`, "--idempotency-key", "order-1").
			must(t, 0, "duplicate", "")
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-1", "--payload", `{"order":9}`, "--idempotency-key", "order-1").
			must(t, 1, "", "new --idempotency-key")
		s.sluice(t, opts{stdin: `{"order":2}`}, "submit", "orders", "merchant_id=m-1", "--payload", "-").must(t, 0, "queued", "")
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-2", "--payload", `{"order":3}`, "--delay", "1h").must(t, 0, "scheduled", "")
		var later struct{ ID string }
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-3", "--payload", `{"order":4}`, "--delay", "1h", "-o", "json").
			must(t, 0, "", "").json(t, &later)
		// -o json writes the API's answer: a scheduled message's has no depth, capacity or
		// retry_at (the client's zero values were written as 0 and null).
		var raw map[string]any
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-3", "--payload", `{"order":5}`, "--delay", "10m", "-o", "json").
			must(t, 0, "", "").json(t, &raw)
		for _, absent := range []string{"depth", "capacity", "retry_at", "domain"} {
			if _, ok := raw[absent]; ok {
				t.Errorf("submit -o json has %q, which the API did not send: %v", absent, raw)
			}
		}
		if raw["state"] != "scheduled" || raw["eta"] == nil || raw["idempotency_key"] == "" || raw["duplicate"] != nil {
			t.Errorf("submit -o json: %v", raw)
		}
		s.sluice(t, opts{}, "cancel", raw["id"].(string)).must(t, 0, "cancelled", "")
		s.sluice(t, opts{}, "cancel", later.ID).must(t, 0, "cancelled "+later.ID+" (it was scheduled", "")
		// This ingress keeps records (-status-keep 1h): a cancel again says it was done, and
		// the status says cancelled.
		s.sluice(t, opts{}, "cancel", later.ID).must(t, 0, later.ID+" was cancelled already (queue orders, key m-3)", "")
		s.sluice(t, opts{}, "status", later.ID).must(t, 0, "cancelled", "")
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-2", "--payload", `not json`).must(t, 2, "", "not valid JSON")
		s.sluice(t, opts{}, "submit", "nope", "x=y", "--payload", `1`).must(t, 1, "", "sluice rules")

		s.sluice(t, opts{}, "status", sub.ID).must(t, 0, "queued", "")
		s.sluice(t, opts{}, "status", "0193a1b2-0000-7000-8000-00000000dead").must(t, 1, "", "")

		// status -o json is GET /v1/messages/{id} as the ingress sent it (position 0 included).
		var viaCLI, viaHTTP any
		s.sluice(t, opts{}, "status", sub.ID, "-o", "json").must(t, 0, "", "").json(t, &viaCLI)
		s.get(t, "/v1/messages/"+sub.ID, &viaHTTP)
		if !reflect.DeepEqual(viaCLI, viaHTTP) {
			t.Errorf("status -o json:\n%v\nthe API sent:\n%v", viaCLI, viaHTTP)
		}

		r := s.sluice(t, opts{}, "keys", "orders", "--top", "5").must(t, 0, "m-1", "")
		if !strings.Contains(r.stdout, "m-1  2") && !strings.Contains(r.stdout, "m-1    2") {
			t.Fatalf("keys:\n%s", r.stdout)
		}

		// A purge asks; off a terminal it refuses without --yes.
		s.sluice(t, opts{}, "purge", "orders").must(t, 2, "", "add --yes")
		s.sluice(t, opts{terminal: true, stdin: "n\n"}, "purge", "orders").must(t, 1, "", "nothing deleted")
		s.sluice(t, opts{}, "status", sub.ID).must(t, 0, "queued", "")
		s.sluice(t, opts{terminal: true, stdin: "y\n"}, "purge", "orders", "--key", "m-1").must(t, 0, "purged", "Delete every message")
		s.sluice(t, opts{}, "status", sub.ID).must(t, 1, "", "")
		s.sluice(t, opts{}, "purge", "orders", "--yes").must(t, 0, "purged queue orders", "")
	})

	t.Run("dead and replay", func(t *testing.T) {
		var ids []string
		for range 2 {
			var sub struct{ ID string }
			s.sluice(t, opts{}, "submit", "fragile", "k=f", "--payload", `{}`, "-o", "json").must(t, 0, "", "").json(t, &sub)
			ids = append(ids, sub.ID)
		}
		dead := func(id string) { // waits until id is a dead letter
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for !strings.Contains(s.sluice(t, opts{}, "status", id, "-o", "json").stdout, `"state": "dead"`) {
				select {
				case <-ctx.Done():
					t.Fatalf("%s never died", id)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		for _, id := range ids {
			dead(id)
		}
		r := s.sluice(t, opts{}, "dead", "--queue", "fragile").must(t, 0, ids[0], "")
		if !strings.Contains(r.stdout, ids[1]) || !strings.Contains(r.stdout, "REASON") {
			t.Fatalf("dead:\n%s", r.stdout)
		}
		var d struct {
			Messages []client.MessageStatus `json:"messages"`
		}
		s.sluice(t, opts{}, "dead", "-o", "json").must(t, 0, "", "").json(t, &d)
		// -o json is the API's page as sent: no "domain" in the messages, no "more".
		for _, args := range [][]string{{"dead", "-o", "json"}, {"dead", "-o", "json", "--all", "--limit", "1"}} {
			var viaCLI, viaHTTP any
			s.sluice(t, opts{}, args...).must(t, 0, "", "").json(t, &viaCLI)
			s.get(t, "/v1/admin/dead", &viaHTTP)
			if !reflect.DeepEqual(viaCLI, viaHTTP) {
				t.Errorf("sluice %s:\n%v\nthe API sent:\n%v", strings.Join(args, " "), viaCLI, viaHTTP)
			}
		}
		if len(d.Messages) != 2 || d.Messages[0].ID != ids[0] || d.Messages[0].State != "dead" {
			t.Fatalf("%+v", d.Messages)
		}
		s.sluice(t, opts{}, "replay", ids[0]).must(t, 0, "replayed "+ids[0], "")
		// Replayed, it is delivered again and dies again at once (its sink answers 422):
		// once it has, the queue's replay takes both.
		dead(ids[0])
		s.sluice(t, opts{}, "replay", "--queue", "fragile").must(t, 0, "replayed 2", "")
		s.sluice(t, opts{}, "replay", ids[0], "--queue", "fragile").must(t, 2, "", "one of them")
		s.sluice(t, opts{}, "replay").must(t, 2, "", "one of them")
	})

	// A delivered message cannot be cancelled (409): the error says so, prefixed once.
	t.Run("cancel delivered", func(t *testing.T) {
		var sub struct{ ID string }
		s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-9", "--payload", `{}`, "-o", "json").must(t, 0, "", "").json(t, &sub)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for !strings.Contains(s.sluice(t, opts{}, "status", sub.ID).stdout, "delivered") {
			select {
			case <-ctx.Done():
				t.Fatalf("%s never delivered", sub.ID)
			case <-time.After(50 * time.Millisecond):
			}
		}
		r := s.sluice(t, opts{}, "cancel", sub.ID).must(t, 1, "", "cannot be cancelled any more")
		if n := strings.Count(r.stderr, "sluice:"); n != 1 {
			t.Errorf("%d \"sluice:\" prefixes, want 1:\n%s", n, r.stderr)
		}
	})

	t.Run("errors say what to do", func(t *testing.T) {
		s.sluice(t, opts{env: map[string]string{"SLUICE_ADMIN_TOKEN": ""}}, "queues").must(t, 4, "", "set SLUICE_ADMIN_TOKEN")
		s.sluice(t, opts{env: map[string]string{"SLUICE_ADMIN_TOKEN": "wrong"}}, "queue", "orders").must(t, 4, "", "set SLUICE_ADMIN_TOKEN")
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.sluice(t, opts{env: map[string]string{"SLUICE_ADMIN_TOKEN": ""}}, "queues", "--token-file", tokenFile).must(t, 0, "orders", "")
		s.sluice(t, opts{env: map[string]string{"SLUICE_ADMIN_TOKEN": "", "SLUICE_ADMIN_TOKEN_FILE": tokenFile}}, "queues").must(t, 0, "orders", "")
		s.sluice(t, opts{}, "queues", "--url", "http://127.0.0.1:1").must(t, 3, "", "is it running?")
		s.sluice(t, opts{}, "queues", "--url", "ftp://x").must(t, 2, "", "want http(s)")
		s.sluice(t, opts{}, "frobnicate").must(t, 2, "", "unknown verb")
		s.sluice(t, opts{}, "queues", "--bogus").must(t, 2, "", "flag provided but not defined")
		s.sluice(t, opts{}, "queue").must(t, 2, "", "queue wants NAME")
		s.sluice(t, opts{}, "queues", "-o", "yaml").must(t, 2, "", "want table or json")
		s.sluice(t, opts{}, "dev").must(t, 2, "", "without the dev stack")
	})
}

// get decodes the JSON body of an admin GET of the ingress, as a script reading the API would.
func (s *system) get(t *testing.T, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Under -submit-tokens, submit and status take SLUICE_SUBMIT_TOKEN, and say so without it.
func TestSubmitToken(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	const submitToken = "shop-submit-token-0123456789"
	if err := os.WriteFile(tokens, []byte("shop submit "+submitToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, "-submit-tokens", tokens)
	s.sluice(t, opts{}, "submit", "orders", "merchant_id=m-1", "--payload", `{}`).must(t, 4, "", "set SLUICE_SUBMIT_TOKEN")
	var sub struct {
		ID string `json:"id"`
	}
	s.sluice(t, opts{env: map[string]string{"SLUICE_SUBMIT_TOKEN": submitToken}}, "submit", "orders", "merchant_id=m-1", "--payload", `{}`, "-o", "json").
		must(t, 0, "", "").json(t, &sub)
	s.sluice(t, opts{}, "status", sub.ID, "--submit-token", submitToken).must(t, 0, sub.ID, "")
}

// A queue verb given a name that is no queue rule — a domain, a typo — answers with the
// rule names there are (and, for a domain, the rules in it), not a bare "not found".
func TestUnknownQueueNamesTheRules(t *testing.T) {
	t.Parallel()
	s := startRules(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders-by-merchant
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK/orders", timeout: 5s}
  - key: carrier
    name: orders-by-carrier
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK/orders", timeout: 5s}
---
domain: mail
descriptors:
  - key: user
    name: mail
    queue: {capacity: 5, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "SINK/mail", timeout: 5s}
`)
	r := s.sluice(t, opts{}, "tune", "orders", "20/s").must(t, cli.ExitRefused, "",
		`no queue rule named "orders": "orders" is a domain; its queue rules: orders-by-merchant, orders-by-carrier`)
	if !strings.Contains(r.stderr, "mail") {
		t.Fatalf("the answer does not list every queue rule:\n%s", r.stderr)
	}
	s.sluice(t, opts{}, "tune", "ordrs", "20/s").must(t, cli.ExitRefused, "",
		`no queue rule named "ordrs"; the queue rules are: orders-by-merchant, orders-by-carrier, mail`)
	for _, verb := range [][]string{{"queue", "orders"}, {"pause", "orders"}, {"resume", "orders"}, {"keys", "orders"}, {"purge", "orders", "--yes"}} {
		s.sluice(t, opts{}, verb...).must(t, cli.ExitRefused, "", `"orders" is a domain; its queue rules: orders-by-merchant, orders-by-carrier`)
	}
	// A real rule is untouched by the hint.
	s.sluice(t, opts{}, "tune", "orders-by-merchant", "20/s").must(t, 0, "20/s  (rules file: 10/s)", "")
	// A negative rate is refused before anything is sent, wherever it stands.
	s.sluice(t, opts{}, "tune", "orders-by-merchant", "-5/s").must(t, cli.ExitUsage, "", "outflow must be positive: -5/s")
	s.sluice(t, opts{}, "tune", "--force", "orders-by-merchant", "-5/s").must(t, cli.ExitUsage, "", "outflow must be positive: -5/s")
	s.sluice(t, opts{}, "tune", "orders-by-merchant", "--total-outflow", "-5/s").must(t, cli.ExitUsage, "", "total-outflow must be positive: -5/s")
	s.sluice(t, opts{}, "tune", "orders-by-merchant", "-5/s", "--force").must(t, cli.ExitUsage, "", "outflow must be positive: -5/s")
	s.sluice(t, opts{}, "tune", "orders-by-merchant", "--bogus").must(t, cli.ExitUsage, "", "flag provided but not defined: -bogus")
}
