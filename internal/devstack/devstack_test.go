package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/devstack"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
)

// TestDevStack is `make run` in-process: `sluice dev -rules deploy/examples` with its
// embedded NATS, its miniredis store, its in-process drainer and its demo sink, driven
// through real HTTP. It is the only test in which the queue scripts, the idempotency keys
// and the park path run on miniredis rather than on a real Redis, and it checks make
// run's promise: one merchant's orders reach the demo sink once each, in admission
// order, no faster than the rule's outflow. (The dev stack decides admission limits and
// POST /v1/check with the in-process limiter, bucket.NewMemory, so the bucket/ scripts
// do not run here; the marketing and check cases go through that limiter.)
//
// The example rules send to the demo sink's default address (127.0.0.1:8090), and this
// test must not take a fixed port: the sink listens on a free one and the dev stack
// sends the rules' deliveries there, unedited. Deliveries are observed through the demo
// sink's own log lines ("demo sink: delivered"): the test injects the process logger.
func TestDevStack(t *testing.T) {
	t.Parallel()
	const examples = "../../deploy/examples"
	set, err := rules.Load(examples)
	if err != nil {
		t.Fatalf("deploy/examples: %v", err)
	}

	// The rules the test drives, taken from the examples so it follows their edits.
	orders := devMatch(t, set, "orders", [][2]string{{"merchant_id", "m-42"}})
	if !orders.HasQueue() || orders.Queue.Outflow.Zero() || orders.Queue.Capacity < 20 || len(orders.RateLimits) > 0 {
		t.Fatalf("deploy/examples: the orders rule %q is no longer a queue of capacity ≥ 20 with an outflow and no admission limit", orders.Name)
	}
	every := orders.Queue.Outflow.Every()
	marketing := devMatch(t, set, "messaging", [][2]string{{"message_type", "marketing"}, {"user_id", "u-7"}})
	if !marketing.HasQueue() || len(marketing.RateLimits) != 1 || marketing.Overflow != rules.OverflowPark ||
		marketing.RateLimits[0].Rate.Requests < 1 || marketing.RateLimits[0].Rate.Interval < time.Hour {
		t.Fatalf("deploy/examples: the marketing rule %q no longer parks past one admission limit of an hour or more", marketing.Name)
	}
	login := devCheckRule(t, set, "edge_proxy", [][2]string{{"authenticated", "false"}, {"path", "/login"}})

	logs := newDevLog()
	cfg, err := devstack.ParseFlags([]string{"-rules", examples, "-data", t.TempDir(),
		"-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats-addr", "127.0.0.1:0", "-sink-addr", "127.0.0.1:0",
		"-rules-poll", "20ms", "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := devstack.Start(ctx, cfg, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the dev process's log:\n%s", logs.lines())
		}
	})
	m := dev.Ingress
	if !strings.HasPrefix(dev.SinkURL, "http://127.0.0.1:") || strings.HasSuffix(dev.SinkURL, ":8090") {
		t.Fatalf("SinkURL = %q, want the demo sink on a free loopback port", dev.SinkURL)
	}

	c := &devClient{t: t, base: "http://" + m.Addr.String()}

	// A probe order, to a merchant of its own, shows the example rules' deliveries reach
	// the demo sink on its free port, with the rules unedited.
	probeUntil := time.Now().Add(10 * time.Second)
	for i := 1; len(logs.deliveries(orders.Name, "")) == 0; i++ {
		if time.Now().After(probeUntil) {
			t.Fatalf("no probe order reached the demo sink at %s within 10s", dev.SinkURL)
		}
		r := c.do("POST", "/v1/messages", devSubmit("orders", [][2]string{{"merchant_id", fmt.Sprintf("probe-%d", i)}}, `{}`))
		if r.code != http.StatusAccepted {
			t.Fatalf("probe order: %d %s", r.code, r.raw)
		}
		waittest.Within(5*every, func() bool { return len(logs.deliveries(orders.Name, "")) > 0 }) // else the next probe
	}

	t.Run("orders", func(t *testing.T) {
		c := c.with(t)
		const n = 12
		capacity := orders.Queue.Capacity
		type admitted struct {
			id        string
			remaining int64
			at        time.Time
		}
		var adm []admitted
		start := time.Now()
		for i := 1; i <= n; i++ {
			sent := time.Now()
			r := c.do("POST", "/v1/messages", devSubmit("orders", [][2]string{{"merchant_id", "m-42"}}, fmt.Sprintf(`{"order_id":%d}`, i)))
			at := time.Now()
			if r.code != http.StatusAccepted {
				t.Fatalf("order %d: %d %s", i, r.code, r.raw)
			}
			var body struct {
				ID       string `json:"id"`
				State    string `json:"state"`
				Depth    *int64 `json:"depth"`
				Capacity int64  `json:"capacity"`
				ETA      string `json:"eta"`
			}
			if err := json.Unmarshal([]byte(r.raw), &body); err != nil {
				t.Fatalf("order %d: body %s: %v", i, r.raw, err)
			}
			eta, err := time.Parse(time.RFC3339Nano, body.ETA)
			if body.ID == "" || body.State != "queued" || body.Depth == nil || *body.Depth < 1 || *body.Depth > int64(i) ||
				body.Capacity != capacity || err != nil {
				t.Fatalf("order %d: body %s, want a queued message with its id, a depth of 1..%d, capacity %d and an RFC 3339 eta", i, r.raw, i, capacity)
			}
			// Each order waits behind the ones before it: the own engine's eta is the estimate
			// depth − 1 intervals from its admission (the first, into an empty queue, may
			// leave at once).
			ahead := time.Duration(*body.Depth-1) * every
			if eta.Before(sent.Add(ahead-time.Millisecond)) || eta.After(at.Add(ahead+time.Millisecond)) {
				t.Errorf("order %d: eta %s with depth %d, want %v after its admission (%s..%s)", i, body.ETA, *body.Depth, ahead,
					sent.UTC().Format(time.RFC3339Nano), at.UTC().Format(time.RFC3339Nano))
			}

			if loc := r.header.Get("Location"); loc != "/v1/messages/"+body.ID {
				t.Errorf("order %d: Location %q, want /v1/messages/%s", i, loc, body.ID)
			}
			remaining := devHeaderInt(t, r.header, "X-RateLimit-Remaining")
			if limit := devHeaderInt(t, r.header, "X-RateLimit-Limit"); limit != capacity {
				t.Errorf("order %d: X-RateLimit-Limit %d, want the capacity %d", i, limit, capacity)
			}
			if remaining != capacity-*body.Depth {
				t.Errorf("order %d: X-RateLimit-Remaining %d with depth %d of capacity %d", i, remaining, *body.Depth, capacity)
			}
			if i == 1 && remaining != capacity-1 {
				t.Errorf("order 1 (empty queue): X-RateLimit-Remaining %d, want %d", remaining, capacity-1)
			}
			// The drainer takes one order per outflow interval: between two answers less
			// than half an interval apart, at most one place freed up, so the count cannot rise.
			if i > 1 {
				prev := adm[len(adm)-1]
				if at.Sub(prev.at) < every/2 && remaining > prev.remaining {
					t.Errorf("order %d: X-RateLimit-Remaining rose from %d to %d within %s", i, prev.remaining, remaining, at.Sub(prev.at))
				}
			}
			adm = append(adm, admitted{body.ID, remaining, at})
		}
		// The loop ran faster than the drainer: the count went down overall.
		if time.Since(start) < time.Duration(n/2)*every && adm[n-1].remaining >= adm[0].remaining {
			t.Errorf("X-RateLimit-Remaining went from %d to %d over %d orders admitted in %s", adm[0].remaining, adm[n-1].remaining, n, time.Since(start))
		}

		// Every order reaches the demo sink. Generous bound: the outflow needs (n−1)×every.
		limit := 10*time.Second + time.Duration(n)*every
		waittest.Eventually(t, limit, fmt.Sprintf("%d orders at the demo sink", n), func() bool { return len(logs.deliveries(orders.Name, "m-42")) >= n })
		// Room for a duplicate to show up: one delivery slot and a bit more.
		time.Sleep(2 * every) // the scenario: no duplicate within a slot and more (an absence has no signal)

		got := logs.deliveries(orders.Name, "m-42")
		if len(got) != n {
			t.Fatalf("the demo sink logged %d orders, want each of the %d once: %v", len(got), n, got)
		}
		gaps := make([]string, 0, len(got))
		for i := 1; i < len(got); i++ {
			gaps = append(gaps, got[i].at.Sub(got[i-1].at).Round(100*time.Microsecond).String())
		}
		t.Logf("the demo sink got %d orders of m-42 from %s, gaps %s", len(got), got[0].at.Format("15:04:05.000"), strings.Join(gaps, " "))
		for i, d := range got {
			if d.id != adm[i].id {
				t.Fatalf("delivery %d was %s, want order %d (%s): not in admission order:\n%v", i+1, d.id, i+1, adm[i].id, got)
			}
			if d.key != "m-42" || d.attempt != "1" || d.bytes != len(fmt.Sprintf(`{"order_id":%d}`, i+1)) {
				t.Errorf("delivery %d: key %q, attempt %q, %d bytes; want m-42, 1 and the payload's length", i+1, d.key, d.attempt, d.bytes)
			}
			// Only the lower bound of the spacing is asserted: a loaded machine stretches gaps.
			// The drainer's slots are exactly one interval apart, but a delivery reaches the
			// sink some time after its slot (worker, JetStream read, HTTP), and that time
			// varies: unloaded it is within 5 ms; under -race with both cores of a 2-core
			// machine kept busy, one delivery arrived 176 ms after its slot and the next on
			// its own (gaps 275.9 ms, then 48 ms). A late delivery may be followed by one
			// closer than the interval (the slots do not move), so what is asserted is that
			// no three deliveries fall within one interval (less half an interval of jitter:
			// a burst), that such close pairs are the exception (deliveries sent in pairs
			// would make every other gap one), and, below, that the span is the outflow's (a
			// doubled rate).
			if i < 2 {
				continue
			}
			if gap := d.at.Sub(got[i-2].at); gap < every/2 {
				t.Errorf("deliveries %d to %d of one merchant within %s, want at least %s between a delivery and the next but one (outflow %d per %s)",
					i-1, i+1, gap, every, orders.Queue.Outflow.Requests, orders.Queue.Outflow.Interval)
			}
		}
		closeGaps := 0
		for i := 1; i < len(got); i++ {
			if got[i].at.Sub(got[i-1].at) < every/2 {
				closeGaps++
			}
		}
		if closeGaps > 1 {
			t.Errorf("%d of %d gaps under half the interval: deliveries in pairs, not one late delivery", closeGaps, len(got)-1)
		}
		// Over all gaps the delays do not add up: only the first and last deliveries' count.
		if span, want := got[n-1].at.Sub(got[0].at), time.Duration(n-1)*every; span < want-every/2 {
			t.Errorf("%d orders of one merchant delivered within %s, want %s", n, span, want)
		}

		// The dev stack keeps delivered records (-status-keep defaults to 1h with -dev): each
		// order answers delivered, in the order the sink got them.
		var prevUpdated time.Time
		for i, a := range adm {
			var st struct {
				ID, Domain, Rule, Key, State string
				Attempts                     int
				CreatedAt                    string `json:"created_at"`
				UpdatedAt                    string `json:"updated_at"`
			}
			// The record is written after the sink answered, without waiting: allow it a moment.
			waittest.Eventually(t, 5*time.Second, "order "+strconv.Itoa(i+1)+" recorded as delivered", func() bool {
				r := c.do("GET", "/v1/messages/"+a.id, "")
				st.State = ""
				json.Unmarshal([]byte(r.raw), &st)
				return r.code == http.StatusOK && st.State == "delivered"
			})
			created, err1 := time.Parse(time.RFC3339Nano, st.CreatedAt)
			updated, err2 := time.Parse(time.RFC3339Nano, st.UpdatedAt)
			if st.ID != a.id || st.Domain != "orders" || st.Rule != orders.Name || st.Key != "m-42" || st.Attempts != 1 ||
				err1 != nil || err2 != nil || updated.Before(created) {
				t.Errorf("GET order %d: %+v", i+1, st)
			}
			if i > 0 && !updated.After(prevUpdated) {
				t.Errorf("order %d recorded delivered at %s, not after order %d (%s)", i+1, st.UpdatedAt, i, prevUpdated.Format(time.RFC3339Nano))
			}
			prevUpdated = updated
		}
		if got := logs.deliveries(orders.Name, "m-42"); len(got) != n {
			t.Errorf("the demo sink logged %d orders in the end, want %d", len(got), n)
		}
	})

	t.Run("marketing past its limit is parked", func(t *testing.T) {
		c := c.with(t)
		max := int(marketing.RateLimits[0].Rate.Requests)
		desc := [][2]string{{"message_type", "marketing"}, {"user_id", "u-7"}}
		for i := 1; i <= max+2; i++ {
			r := c.do("POST", "/v1/messages", devSubmit("messaging", desc, fmt.Sprintf(`{"text":"offer %d"}`, i)))
			if r.code != http.StatusAccepted {
				t.Fatalf("marketing %d: %d %s", i, r.code, r.raw)
			}
			var body struct {
				ID      string `json:"id"`
				State   string `json:"state"`
				RetryAt string `json:"retry_at"`
			}
			if err := json.Unmarshal([]byte(r.raw), &body); err != nil || body.ID == "" {
				t.Fatalf("marketing %d: body %s: %v", i, r.raw, err)
			}
			if loc := r.header.Get("Location"); loc != "/v1/messages/"+body.ID {
				t.Errorf("marketing %d: Location %q", i, loc)
			}
			if i <= max {
				if body.State != "queued" {
					t.Fatalf("marketing %d of a limit of %d: %s, want queued", i, max, r.raw)
				}
				continue
			}
			retryAt, err := time.Parse(time.RFC3339, body.RetryAt)
			if body.State != "parked" || err != nil || !retryAt.After(time.Now()) {
				t.Fatalf("marketing %d past a limit of %d: %s, want parked with a retry_at in the future", i, max, r.raw)
			}
			if rem := devHeaderInt(t, r.header, "X-RateLimit-Remaining"); rem != 0 {
				t.Errorf("marketing %d (parked): X-RateLimit-Remaining %d, want 0", i, rem)
			}
			s := c.do("GET", "/v1/messages/"+body.ID, "")
			if s.code != http.StatusOK || !strings.Contains(s.raw, `"state":"parked"`) || !strings.Contains(s.raw, `"retry_at"`) {
				t.Errorf("GET parked marketing %d: %d %s", i, s.code, s.raw)
			}
		}
	})

	t.Run("check", func(t *testing.T) {
		c := c.with(t)
		max := int(login.RateLimits[0].Rate.Requests)
		// A fixed window (envoy's default algorithm) starts afresh at multiples of its
		// length: keep the checks clear of a boundary.
		window := login.RateLimits[0].Rate.Interval
		if left := window - time.Duration(time.Now().UnixNano())%window; left < time.Second {
			time.Sleep(left + 10*time.Millisecond) // past the window boundary
		}
		req := `{"domain":"edge_proxy","descriptors":[{"entries":[{"key":"authenticated","value":"false"},{"key":"path","value":"/login"}]}]}`
		for i := 1; i <= max+1; i++ {
			r := c.do("POST", "/v1/check", req)
			var body struct {
				OverallCode string `json:"overall_code"`
				Statuses    []struct {
					Code           string `json:"code"`
					LimitRemaining int64  `json:"limit_remaining"`
				} `json:"statuses"`
			}
			if err := json.Unmarshal([]byte(r.raw), &body); err != nil || len(body.Statuses) != 1 {
				t.Fatalf("check %d: %d %s: %v", i, r.code, r.raw, err)
			}
			switch {
			case i <= max && (r.code != http.StatusOK || body.OverallCode != "OK" || body.Statuses[0].LimitRemaining != int64(max-i)):
				t.Fatalf("check %d of %d per %s: %d %s, want 200 OK with %d remaining", i, max, login.RateLimits[0].Rate.Interval, r.code, r.raw, max-i)
			case i > max && (r.code != http.StatusTooManyRequests || body.OverallCode != "OVER_LIMIT" || r.header.Get("Retry-After") == ""):
				t.Fatalf("check %d of %d per %s: %d %s, want 429 OVER_LIMIT with Retry-After", i, max, login.RateLimits[0].Rate.Interval, r.code, r.raw)
			}
		}
	})
}

// devMatch is the rule of the examples that a submit of domain/descriptor would use.
func devMatch(t *testing.T, set *rules.Set, domain string, desc [][2]string) *rules.Rule {
	t.Helper()
	m, ok := set.Match(domain, devEntries(desc))
	if !ok {
		t.Fatalf("deploy/examples: no rule for %s %v", domain, desc)
	}
	return m.Rule
}

// devCheckRule is the one rule of the examples that a check of domain/descriptor counts against.
func devCheckRule(t *testing.T, set *rules.Set, domain string, desc [][2]string) *rules.Rule {
	t.Helper()
	res := set.Check(domain, [][]rules.Entry{devEntries(desc)})
	if len(res) != 1 || !res[0].Applies() || res[0].Rule == nil || len(res[0].Rule.RateLimits) != 1 ||
		res[0].Rule.ShadowMode || res[0].Rule.RateLimits[0].Rate.Requests < 1 || res[0].Rule.RateLimits[0].Rate.Interval < time.Minute {
		t.Fatalf("deploy/examples: %s %v no longer checks against one enforced limit of a minute or more", domain, desc)
	}
	return res[0].Rule
}

func devEntries(desc [][2]string) []rules.Entry {
	var e []rules.Entry
	for _, kv := range desc {
		e = append(e, rules.Entry{Key: kv[0], Value: kv[1]})
	}
	return e
}

func devSubmit(domain string, desc [][2]string, payload string) string {
	var d []string
	for _, kv := range desc {
		k, _ := json.Marshal(kv[0])
		v, _ := json.Marshal(kv[1])
		d = append(d, fmt.Sprintf(`{"key":%s,"value":%s}`, k, v))
	}
	return fmt.Sprintf(`{"domain":%q,"descriptor":[%s],"payload":%s}`, domain, strings.Join(d, ","), payload)
}

func devHeaderInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s = %q, want an integer", name, h.Get(name))
	}
	return v
}

type devClient struct {
	t    *testing.T
	base string
}

func (c *devClient) with(t *testing.T) *devClient { return &devClient{t: t, base: c.base} }

type devReply struct {
	code   int
	header http.Header
	raw    string
}

func (c *devClient) do(method, path, body string) devReply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost && path == "/v1/messages" {
		// The dev stack runs the own engine: the 202's depth and eta are answered when asked.
		req.Header.Set("Prefer", "return=representation")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return devReply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
}

// devDelivery is one "demo sink: delivered" log line.
type devDelivery struct {
	at                     time.Time
	rule, key, id, attempt string
	bytes                  int
}

func (d devDelivery) String() string {
	return fmt.Sprintf("%s %s #%s", d.at.Format("15:04:05.000"), d.id, d.attempt)
}

// devLog is the dev process's logger: it keeps the demo sink's deliveries, counts rules
// reloads and keeps the first 2000 lines at info level and above for a failing test's
// output; the rest is dropped.
type devLog struct {
	attrs []slog.Attr
	state *devLogState
}

type devLogState struct {
	mu         sync.Mutex
	delivered  []devDelivery
	reloadsOK  int
	reloadsBad int
	logLines   []string
}

func newDevLog() *devLog { return &devLog{state: &devLogState{}} }

func (l *devLog) st() *devLogState { return l.state }

func (l *devLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *devLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &devLog{attrs: append(append([]slog.Attr(nil), l.attrs...), as...), state: l.st()}
}

func (l *devLog) WithGroup(string) slog.Handler { return &devLog{attrs: l.attrs, state: l.st()} }

func (l *devLog) Handle(_ context.Context, r slog.Record) error {
	s := l.st()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Message == "demo sink: delivered":
		d := devDelivery{at: r.Time}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "rule":
				d.rule = a.Value.String()
			case "key":
				d.key = a.Value.String()
			case "id":
				d.id = a.Value.String()
			case "attempt":
				d.attempt = a.Value.String()
			case "bytes":
				d.bytes = int(a.Value.Int64())
			}
			return true
		})
		s.delivered = append(s.delivered, d)
	case r.Message == "rules reloaded":
		s.reloadsOK++
	case strings.HasPrefix(r.Message, "rules reload failed"):
		s.reloadsBad++
	}
	if r.Level >= slog.LevelInfo {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %s", r.Time.Format("15:04:05.000"), r.Level, r.Message)
		for _, a := range l.attrs {
			fmt.Fprintf(&b, " %s", a)
		}
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
		if len(s.logLines) < 2000 {
			s.logLines = append(s.logLines, b.String())
		}
	}
	return nil
}

// deliveries are the demo sink's deliveries of rule, of key only unless key is "".
func (l *devLog) deliveries(rule, key string) []devDelivery {
	s := l.st()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []devDelivery
	for _, d := range s.delivered {
		if d.rule == rule && (key == "" || d.key == key) {
			out = append(out, d)
		}
	}
	return out
}

func (l *devLog) reloads() int {
	s := l.st()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadsOK
}

func (l *devLog) reloadFailures() int {
	s := l.st()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadsBad
}

func (l *devLog) lines() string {
	s := l.st()
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.logLines, "\n")
}

// TestBusyPortsFailAtOnce: every port `sluice dev` binds, when busy, stops the start at
// once with an error naming the flag and the address (a busy NATS port used to wait 15 s
// and then say only "embedded NATS server not ready after 15s").
func TestBusyPortsFailAtOnce(t *testing.T) {
	t.Parallel()
	examples, _ := filepath.Abs("../../deploy/examples")
	for _, flagName := range []string{"-http", "-grpc", "-nats-addr", "-sink-addr"} {
		t.Run(flagName, func(t *testing.T) {
			t.Parallel()
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			addrs := map[string]string{"-http": "127.0.0.1:0", "-grpc": "127.0.0.1:0", "-nats-addr": "127.0.0.1:0", "-sink-addr": "127.0.0.1:0"}
			addrs[flagName] = busy.Addr().String()
			args := []string{"-rules", examples, "-data", t.TempDir()}
			for f, a := range addrs {
				args = append(args, f, a)
			}
			cfg, err := devstack.ParseFlags(args, func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			dev, err := devstack.Start(ctx, cfg, slog.New(slog.DiscardHandler))
			took := time.Since(start)
			if err == nil {
				dev.Close()
				t.Fatalf("started with %s %s busy", flagName, busy.Addr())
			}
			if !strings.Contains(err.Error(), flagName+" "+busy.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("error %q, want it to name %s %s and say the address is in use", err, flagName, busy.Addr())
			}
			// Everything else starts in well under a second; 15 s was the old wait.
			if took > 10*time.Second {
				t.Errorf("failed after %s, want at once", took)
			}
		})
	}
}

// TestDataDirInUse: a second `sluice dev` on the data directory of a running one, with
// ports of its own, fails at once naming the directory and how to choose another (two
// embedded NATS servers used to share one JetStream store); the first keeps working, and
// the directory is free again once it stops.
func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	examples, _ := filepath.Abs("../../deploy/examples")
	dir := t.TempDir()
	start := func() (*devstack.Stack, error) {
		cfg, err := devstack.ParseFlags([]string{"-rules", examples, "-data", dir,
			"-http", "127.0.0.1:0", "-grpc", "", "-nats-addr", "127.0.0.1:0", "-sink-addr", "127.0.0.1:0",
			"-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return devstack.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	}
	first, err := start()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	began := time.Now()
	second, err := start()
	if err == nil {
		second.Close()
		t.Fatalf("a second sluice dev started on %s, which the first one uses", dir)
	}
	for _, want := range []string{"-data " + dir, "another `sluice dev` (pid " + strconv.Itoa(os.Getpid()) + ")", "SLUICE_DEV_DATA"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q, want it to contain %q", err, want)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("failed after %s, want at once", took)
	}

	// The first one still admits (its JetStream store works) and answers.
	c := &devClient{t: t, base: "http://" + first.Ingress.Addr.String()}
	if r := c.do("POST", "/v1/messages", devSubmit("orders", [][2]string{{"merchant_id", "m-lock"}}, `{}`)); r.code != http.StatusAccepted {
		t.Fatalf("the first sluice dev after the second's failed start: %d %s", r.code, r.raw)
	}

	if r := c.do("GET", "/readyz", ""); r.code != http.StatusOK {
		t.Fatalf("the first sluice dev is not ready after the second's failed start: %d %s", r.code, r.raw)
	}

	// Stopped, it leaves the directory to the next one.
	first.Close()
	third, err := start()
	if err != nil {
		t.Fatalf("start after the first stopped: %v", err)
	}
	defer third.Close()
	c = &devClient{t: t, base: "http://" + third.Ingress.Addr.String()}
	if r := c.do("GET", "/readyz", ""); r.code != http.StatusOK {
		t.Fatalf("the sluice dev started after the first stopped is not ready: %d %s", r.code, r.raw)
	}
}

// `sluice dev -sink-fail`: the demo sink fails what the flag says, so a laptop shows a
// sink's refusal end to end — here a 422 for every order, which makes it a dead letter at
// once — and /_demo/fail on the sink changes it while the stack runs. A bad fault is a
// usage error naming the flag.
func TestDevSinkFail(t *testing.T) {
	t.Parallel()
	examples, _ := filepath.Abs("../../deploy/examples")
	if _, err := devstack.ParseFlags([]string{"-rules", examples, "-sink-fail", "path=/orders,status=99"}, func(string) string { return "" }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-sink-fail") || !strings.Contains(err.Error(), "status=99") {
		t.Fatalf("a bad -sink-fail: %v, want a usage error naming it", err)
	}
	cfg, err := devstack.ParseFlags([]string{"-rules", examples, "-data", t.TempDir(),
		"-http", "127.0.0.1:0", "-grpc", "", "-nats-addr", "127.0.0.1:0", "-sink-addr", "127.0.0.1:0", "-shutdown-timeout", "2s"},
		func(k string) string {
			if k == "SLUICE_DEV_SINK_FAIL" {
				return "path=/orders,status=422,share=1"
			}
			return ""
		}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := devstack.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var banner strings.Builder
	dev.PrintBanner(&banner)
	if !strings.Contains(banner.String(), "failing: path=/orders,status=422,share=1") || !strings.Contains(banner.String(), "/_demo/fail") {
		t.Fatalf("the banner does not say the sink fails, nor how to change it:\n%s", banner.String())
	}
	c := &devClient{t: t, base: "http://" + dev.Ingress.Addr.String()}
	state := func(id string) string {
		r := c.do("GET", "/v1/messages/"+id, "")
		var st struct {
			State     string `json:"state"`
			LastError string `json:"last_error"`
		}
		json.Unmarshal([]byte(r.raw), &st)
		return st.State + " " + st.LastError
	}
	submitOne := func(merchant string) string {
		r := c.do("POST", "/v1/messages", devSubmit("orders", [][2]string{{"merchant_id", merchant}}, `{}`))
		var v struct{ ID string }
		if json.Unmarshal([]byte(r.raw), &v); r.code != http.StatusAccepted || v.ID == "" {
			t.Fatalf("submit: %d %s", r.code, r.raw)
		}
		return v.ID
	}
	id := submitOne("m-fail")
	var got string
	waittest.Eventually(t, 10*time.Second, "the order dead after the sink's 422", func() bool {
		got = state(id)
		return strings.HasPrefix(got, "dead ")
	})
	if !strings.Contains(got, "422") {
		t.Fatalf("dead with %q, want the sink's 422 named", got)
	}
	if dev.Sink.Failed() != 1 || dev.Sink.Count() != 0 {
		t.Fatalf("sink: %d failed, %d delivered; want 1 and 0", dev.Sink.Failed(), dev.Sink.Count())
	}

	// Healed at run time: the next order is delivered.
	req, _ := http.NewRequest("DELETE", dev.SinkURL+"/_demo/fail", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE /_demo/fail: %v %v", resp, err)
	}
	id = submitOne("m-heal")
	waittest.Eventually(t, 10*time.Second, "the order delivered once the fault is cleared", func() bool {
		return strings.HasPrefix(state(id), "delivered")
	})
}
