package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// chromiumPath finds the browser for the console tests: $SLUICE_CHROMIUM, or Debian's
// chromium (scripts/ensure-chromium.sh installs it for make test when it can).
func chromiumPath() (string, bool) {
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// screenshotDir is where the console test saves its screenshots, for a reviewer:
// $SLUICE_SCREENSHOTS, or sluice-console-screenshots in the temporary directory.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("SLUICE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sluice-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is one headless Chromium tab with everything its console said.
type browser struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func newBrowser(t *testing.T) *browser {
	path, ok := chromiumPath()
	if !ok {
		t.Skip("SKIPPED: no chromium for the console's browser test: install it with 'sudo apt-get install chromium' (make test does as root) or set SLUICE_CHROMIUM")
	}
	// The flags this machine needs (its network is closed): no background networking,
	// no component updates, no sync, a fresh profile.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, dir: screenshotDir(t)}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.msgs = append(b.msgs, m)
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\nconsole: %v", what, err, b.console())
	}
}

// wait polls a JavaScript condition until it is true.
func (b *browser) wait(what, js string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		status, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
		b.t.Fatalf("waiting for %s (%s): %v; status line %q; console: %v", what, js, err, status, b.console())
	}
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return v
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) console() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.msgs {
		out = append(out, m.String())
	}
	return out
}

// errors are the console's exceptions and errors, less the network errors the test
// causes on purpose (a refused token, a refused stale change).
func (b *browser) errors(expected ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.msgs {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		if m.Source == "network" && slices.ContainsFunc(expected, func(s string) bool { return strings.Contains(m.Text, s) }) {
			continue
		}
		out = append(out, m.String())
	}
	return out
}

const consoleToken = "console-token-0123"

// TestConsoleInBrowser drives the operator console in headless Chromium against a real
// ingress with an in-process drainer, real Redis, embedded NATS and a recording sink:
// sign-in by keyboard, a queue with depth in the list, pause and resume, an outflow change
// that the drainer obeys at the sink, a 412 on a concurrent change, a dead letter replayed
// and delivered, a purge behind a typed confirmation, both colour schemes, 390 px wide,
// and no error in the browser's console. Screenshots go to screenshotDir.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	sink := sinktest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	rulesYAML := strings.ReplaceAll(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 200, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK"}
---
domain: messaging
descriptors:
  - key: user_id
    name: marketing
    queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
    overflow: park
    sink: {url: "SINK"}
---
domain: auth
descriptors:
  - key: auth_type
    value: login
    name: auth-login
    rate_limit: {unit: minute, requests_per_unit: 5}
---
# Rules as long as real ones, so the tables are as wide as they get in use.
domain: notifications_outbound_delivery
descriptors:
  - key: tenant_identifier
    descriptors:
      - key: delivery_channel
        value: transactional-email
        name: notifications-per-tenant-transactional-email
        rate_limit:
          - {unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40, name: tenant_email_burst_limit}
          - {unit: day, requests_per_unit: 100000, time_zone: America/New_York, name: tenant_email_daily_quota}
        queue: {capacity: 100000, outflow: {unit: second, requests_per_unit: 25}, total_outflow: {unit: second, requests_per_unit: 5000}}
        overflow: park
        sink: {url: "SINK"}
  - key: source_cluster
    value: edge-proxy-eu-west-1
    descriptors:
      - key: destination_cluster
        value: payments-api-internal-override
        rate_limit:
          name: override_limit_for_payments_internal
          replaces: [{name: banned_limit_for_scrapers}]
          unit: minute
          requests_per_unit: 2
`, "SINK", sink.URL)
	if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	e := launch(t, path, nil, nil, "-admin-token", consoleToken, "-drain", "-drain-workers", "4")
	n := e.nats
	t.Logf("screenshots in %s", b.dir)

	// 150 orders of one merchant: a queue with depth, drained at 10/s. The queue must not
	// run dry before the outflow change below: the sign-in and the pages before it take
	// 10 s or more on a loaded machine (60 orders, 6 s of outflow, ran out once).
	for i := 0; i < 150; i++ {
		if rep := e.do("POST", "/v1/messages", submit("orders", [][2]string{{"merchant_id", "m-42"}}, strconv.Itoa(i))); rep.code != 202 {
			t.Fatalf("submit %d: %d %s", i, rep.code, rep.raw)
		}
	}

	// Sign in: a wrong token is refused, then the right one, by keyboard only.
	b.do("open the console", chromedp.Navigate(e.base+"/ui"))
	b.wait("the sign-in form", `!document.getElementById("signin").hidden`)
	b.shot("signin")
	b.do("wrong token", chromedp.SendKeys(chromedp.ID("token"), "not-the-token"), chromedp.KeyEvent(kb.Enter))
	b.wait("the refusal", `document.getElementById("signin-error").textContent.includes("refused")`)
	if got := b.eval(`sessionStorage.getItem("sluice-admin-token") === null ? "none" : "kept"`); got != "none" {
		t.Fatalf("a refused token is %s in session storage", got)
	}
	b.do("focus the page", chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); document.body.focus()`))
	var visited []string
	for i := 0; i < 6 && b.eval(`document.activeElement.id`) != "token"; i++ {
		b.do("tab", chromedp.KeyEvent(kb.Tab))
		visited = append(visited, b.eval(`document.activeElement.tagName + "#" + document.activeElement.id + "." + document.activeElement.className`))
	}
	t.Logf("Tab visits %v", visited)
	if got := b.eval(`document.activeElement.id`); got != "token" {
		t.Fatalf("Tab does not reach the token field (focus on %q)", got)
	}
	b.do("type the token", chromedp.KeyEvent(consoleToken), chromedp.KeyEvent(kb.Enter))
	b.wait("the queues page", `!document.getElementById("page-queues").hidden`)
	if got := b.eval(`document.cookie + "|" + location.href`); strings.Contains(got, consoleToken) {
		t.Fatalf("the token is in a cookie or the URL: %s", got)
	}

	// The queue list shows the orders queue with messages waiting.
	b.wait("orders with depth", `(() => { const c = document.querySelector('tr[data-queue="orders"] td[data-field="depth"]');
		return c !== null && parseInt(c.textContent.replace(/\D/g, ""), 10) > 0 })()`)
	b.wait("the rules", `document.querySelector('#rules tr[data-rule="marketing"]') !== null`)
	if got := b.eval(`document.querySelector('#rules tr[data-rule="marketing"]').textContent`); !strings.Contains(got, "user_id=(each value)") || !strings.Contains(got, "overflow park") {
		t.Fatalf("the marketing rule reads %q", got)
	}
	if got := b.eval(`document.querySelector('#rules tr[data-rule="auth-login"]').textContent`); !strings.Contains(got, "check") || !strings.Contains(got, "5/minute fixed window") {
		t.Fatalf("the check rule reads %q", got)
	}
	b.shot("queues")
	b.wait("two samples in the sparklines", `document.querySelector('tr[data-queue="orders"] td[data-field="depth"] polyline') !== null`)
	b.noOverflow("the queues page at 1280 px")
	b.noMidWordBreaks("the queues page at 1280 px")
	b.sparkScales("the queues page")

	// One queue: pause, and nothing leaves; resume, and deliveries go on.
	b.do("open the queue", chromedp.Click(chromedp.CSS(`tr[data-queue="orders"] a`)))
	b.wait("the queue page", `!document.getElementById("page-queue").hidden && document.getElementById("q-title").textContent === "orders"`)
	b.wait("hottest keys", `document.querySelector("#keys tbody td") !== null && document.querySelector("#keys tbody td").textContent === "m-42"`)
	b.shot("queue")
	b.wait("two samples in the charts", `document.querySelector("#q-depth-chart polyline") !== null`)
	b.noOverflow("the queue page at 1280 px")
	b.sparkScales("the queue page")
	b.do("pause", chromedp.Click(chromedp.ID("q-pause")))
	b.wait("paused", `document.getElementById("q-state").textContent === "Paused"`)
	time.Sleep(1500 * time.Millisecond) // overrides reach drainers within 1 s; one delivery may be under way
	before := len(sink.Accepted())
	time.Sleep(1500 * time.Millisecond) // the scenario: a paused queue delivers nothing for 1.5 s
	if after := len(sink.Accepted()); after != before {
		t.Fatalf("paused, yet %d deliveries in 1.5 s", after-before)
	}
	b.do("resume", chromedp.Click(chromedp.ID("q-pause")))
	b.wait("running", `document.getElementById("q-state").textContent === "Running"`)
	fast := gaps(sink.WaitAccepted(before+6, 10*time.Second)[before+1:])

	// The outflow form: 2/s, and the drainer obeys — deliveries get slower at the sink.
	b.do("set the outflow", chromedp.SetValue(chromedp.ID("of-rate"), "2"), chromedp.SetValue(chromedp.ID("of-unit"), "second"),
		chromedp.Click(chromedp.CSS(`#outflow-form button[type="submit"]`)))
	b.wait("the change applied", `document.getElementById("status").textContent.includes("Outflow is now 2/second")`)
	changed := len(sink.Accepted())
	time.Sleep(1500 * time.Millisecond) // within 1 s on every drainer
	from := len(sink.Accepted())
	slow := gaps(sink.WaitAccepted(from+4, 15*time.Second)[from:])
	if median(fast) > 150*time.Millisecond || median(slow) < 400*time.Millisecond || median(slow) < 3*median(fast) {
		t.Fatalf("outflow 10/s → 2/s: median gap %v before, %v after (%d deliveries since the change)", median(fast), median(slow), from-changed)
	}
	b.shot("queue-tuned")

	// A concurrent change: someone else sets 3/s while the form still shows 2/s; applying
	// 4/s from the form is refused (412), said so, and the form shows 3 again.
	if rep := e.admin("PATCH", "/v1/admin/queues/orders", `{"outflow":{"unit":"second","requests_per_unit":3}}`); rep.code != 200 {
		t.Fatalf("the other operator's change: %d %s", rep.code, rep.raw)
	}
	b.do("a stale change", chromedp.SetValue(chromedp.ID("of-rate"), "4"), chromedp.Click(chromedp.CSS(`#outflow-form button[type="submit"]`)))
	b.wait("the 412 said", `document.getElementById("status").textContent.includes("Changed by someone else")`)
	b.wait("the form reloaded", `document.getElementById("of-rate").value === "3"`)
	if q := e.admin("GET", "/v1/admin/queues/orders", ""); q.body["outflow"].(map[string]any)["requests_per_unit"] != float64(3) {
		t.Fatalf("the stale change was applied: %s", q.raw)
	}
	b.shot("queue-412")

	// A dead letter, replayed from the page and delivered.
	_, js := natstest.Connect(t, n.URL())
	dead, err := retry.NewDeadLetters(js, retry.DeadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	deadID := "0190c3a2-0000-7000-8000-0000000c0501"
	if err := dead.Dead(context.Background(), "orders", queue.Message{ID: deadID, Rule: "orders", Key: "m-dead",
		Payload: []byte(`{"order":"lost"}`), CreatedAt: time.Now(), Attempt: 8, LastError: "sink answered 500"}, "max attempts reached"); err != nil {
		t.Fatal(err)
	}
	b.do("dead letters", chromedp.Navigate(e.base+"/ui/#/dead?queue=orders"))
	b.wait("the dead letter", fmt.Sprintf(`document.querySelector('tr[data-id="%s"]') !== null`, deadID))
	if got := b.eval(fmt.Sprintf(`document.querySelector('tr[data-id="%s"]').textContent`, deadID)); !strings.Contains(got, "max attempts reached") || !strings.Contains(got, "sink answered 500") {
		t.Fatalf("the dead letter's row does not say why: %q", got)
	}
	b.shot("dead")
	b.noOverflow("the dead letters page at 1280 px")
	b.noMidWordBreaks("the dead letters page at 1280 px")
	b.do("replay", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id="%s"] button`, deadID))))
	b.wait("replayed", `document.getElementById("status").textContent.includes("is queued again")`)
	waittest.Eventually(t, 20*time.Second, "the replayed dead letter delivered", func() bool {
		return slices.ContainsFunc(sink.Accepted(), func(d sinktest.Delivery) bool { return d.ID == deadID })
	})

	// Purge only after typing the queue's name.
	b.do("back to the queue", chromedp.Navigate(e.base+"/ui/#/queue/orders"))
	b.wait("the queue page", `document.getElementById("q-title").textContent === "orders"`)
	if b.eval(`String(document.getElementById("purge-button").disabled)`) != "true" {
		t.Fatal("purge is possible without the confirmation")
	}
	b.do("type a wrong name", chromedp.SendKeys(chromedp.ID("purge-confirm"), "order"))
	if b.eval(`String(document.getElementById("purge-button").disabled)`) != "true" {
		t.Fatal("purge is possible with a wrong name typed")
	}
	b.do("type the name", chromedp.SendKeys(chromedp.ID("purge-confirm"), "s"), chromedp.Click(chromedp.ID("purge-button")))
	b.wait("purged", `document.getElementById("status").textContent.includes("Purged orders")`)
	if q := e.admin("GET", "/v1/admin/queues/orders", ""); q.body["depth"] != float64(0) {
		t.Fatalf("after the purge: %s", q.raw)
	}

	// The audit trail shows what was done above, newest first: the purge, the replay, the
	// pause and the outflow tune, each with who did it. Changes of the longest-named rule,
	// made first, make its table as wide as it gets: it still fits 1280 px.
	const long = "notifications-per-tenant-transactional-email"
	for _, patch := range []string{`{"paused":true}`, `{"outflow":{"unit":"second","requests_per_unit":20},"total_outflow":{"unit":"second","requests_per_unit":4000}}`, `{"reset":true}`} {
		if rep := e.admin("PATCH", "/v1/admin/queues/"+long, patch); rep.code != 200 {
			t.Fatalf("PATCH %s %s: %d %s", long, patch, rep.code, rep.raw)
		}
	}
	b.do("audit", chromedp.Navigate(e.base+"/ui/#/audit"))
	b.wait("the audit trail", `document.querySelectorAll('#audit tbody tr').length >= 7`)
	trail := b.eval(`document.getElementById("audit").tBodies[0].textContent`)
	for _, want := range []string{"purge", "replay", "pause", "tune", "orders"} {
		if !strings.Contains(trail, want) {
			t.Fatalf("the audit page does not show %q: %q", want, trail)
		}
	}
	if first := b.eval(`document.querySelector('#audit tbody tr').textContent`); !strings.Contains(first, long) {
		t.Fatalf("the newest change (of %s) is not first: %q", long, first)
	}
	b.shot("audit")
	b.noOverflow("the audit page at 1280 px")
	b.noMidWordBreaks("the audit page at 1280 px")

	// Readable in both colour schemes: text, muted text, links and buttons at least 4.5:1.
	for _, scheme := range []string{"light", "dark"} {
		b.do("colour scheme "+scheme, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		}))
		b.do("queues", chromedp.Navigate(e.base+"/ui/#/queues"))
		b.wait("the table", `document.querySelector('tr[data-queue="orders"]') !== null`)
		for _, c := range contrasts(t, b) {
			if c.ratio < 4.5 {
				t.Errorf("%s scheme: %s has contrast %.2f:1 (%s on %s), want ≥ 4.5:1", scheme, c.what, c.ratio, c.fg, c.bg)
			}
		}
		b.shot("queues-" + scheme)
	}

	// 390 px wide: nothing wider than the screen but the tables, which scroll in place; the
	// queue list shows every queue's depth and state without scrolling sideways.
	b.do("narrow", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	for _, page := range []string{"queues", "queue/orders", "dead?queue=orders", "audit"} {
		b.do("open "+page, chromedp.Navigate(e.base+"/ui/#/"+page))
		b.wait(page, `document.body.dataset.shown === "#/`+page+`" && document.body.dataset.busy === undefined`)
		if w := b.eval(`String(document.documentElement.scrollWidth)`); w != "390" {
			t.Errorf("%s at 390 px: the page is %s px wide", page, w)
		}
		b.noMidWordBreaks(page + " at 390 px")
		b.shot("narrow-" + strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(page))
		if page != "queues" {
			continue
		}
		b.wait("the queues", `document.querySelectorAll("#queues tbody tr").length === 3`)
		raw := b.eval(`JSON.stringify([...document.querySelectorAll("#queues tbody tr")].map((tr) => {
			const box = tr.closest(".scroll").getBoundingClientRect(), out = [tr.dataset.queue];
			for (const f of ["depth", "state"]) {
				const r = tr.querySelector('td[data-field="' + f + '"]').getBoundingClientRect();
				out.push(f + (r.width > 0 && r.left >= box.left && r.right <= Math.min(box.right, 390) + 0.5 ? " shown" : " off screen at " + Math.round(r.left) + "–" + Math.round(r.right)));
			}
			return out.join(": ");
		}))`)
		var rows []string
		if err := jsonUnmarshal(raw, &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if strings.Contains(r, "off screen") {
				t.Errorf("the queues page at 390 px: %s", r)
			}
		}
	}

	if errs := b.errors("401", "412"); len(errs) > 0 {
		t.Fatalf("the browser's console has errors:\n%s", strings.Join(errs, "\n"))
	}
}

// noOverflow fails the test when anything on the page is wider than the window: the page
// itself, a table that would need its scroll bar, or a cell or button (the dead letters'
// Replay) reaching past the right edge.
func (b *browser) noOverflow(what string) {
	b.t.Helper()
	b.wait("no refresh under way", `document.body.dataset.busy === undefined`)
	raw := b.eval(`JSON.stringify((() => {
		const vw = document.documentElement.clientWidth, bad = [];
		if (document.documentElement.scrollWidth > vw) bad.push("the page is " + document.documentElement.scrollWidth + " px wide");
		for (const s of document.querySelectorAll("main section:not([hidden]) .scroll")) {
			const name = s.getAttribute("aria-label") || s.getAttribute("aria-labelledby");
			if (s.scrollWidth > s.clientWidth + 1) bad.push(name + " is " + s.scrollWidth + " px wide in " + s.clientWidth + " px");
			const box = s.getBoundingClientRect();
			for (const e of s.querySelectorAll("th, td, button")) {
				const r = e.getBoundingClientRect();
				if (r.width > 0 && (r.right > box.right + 1 || r.right > vw)) bad.push(name + ": " + e.tagName + " " + JSON.stringify(e.textContent.slice(0, 30)) + " ends at " + Math.round(r.right) + " px");
			}
		}
		return bad;
	})())`)
	var bad []string
	if err := jsonUnmarshal(raw, &bad); err != nil {
		b.t.Fatalf("%s: %v", raw, err)
	}
	if w := b.eval(`String(document.documentElement.clientWidth)`); w != "1280" {
		b.t.Fatalf("%s: the window is %s px wide, not 1280", what, w)
	}
	if len(bad) > 0 {
		b.t.Errorf("%s overflows:\n%s", what, strings.Join(bad, "\n"))
	}
}

// noMidWordBreaks fails the test when a table cell on the page wraps inside a word: a
// run of characters between spaces and the separators a name may wrap after
// (- _ . = , : / @), as rule, domain and queue names, ids, keys and descriptors are
// written. Each such word must lie on one line.
func (b *browser) noMidWordBreaks(what string) {
	b.t.Helper()
	raw := b.eval(`JSON.stringify((() => {
		const bad = [];
		for (const cell of document.querySelectorAll("main section:not([hidden]) td")) {
			if (cell.getClientRects().length === 0) continue; // not displayed
			const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
			for (let n = walk.nextNode(); n; n = walk.nextNode()) {
				for (const m of n.textContent.matchAll(/[^\s\-_.=,:\/@]*[\-_.=,:\/@]?/g)) {
					if (m[0] === "") continue;
					const range = document.createRange();
					range.setStart(n, m.index);
					range.setEnd(n, m.index + m[0].length);
					const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
					if (tops.size > 1) bad.push(JSON.stringify(m[0]) + " of " + JSON.stringify(cell.textContent.slice(0, 60)) + " is broken over " + tops.size + " lines");
				}
			}
		}
		return bad;
	})())`)
	var bad []string
	if err := jsonUnmarshal(raw, &bad); err != nil {
		b.t.Fatalf("%s: %v", raw, err)
	}
	if len(bad) > 0 {
		b.t.Errorf("%s breaks words:\n%s", what, strings.Join(bad, "\n"))
	}
}

// sparkScales checks every sparkline on the page says its scale: the highest and lowest
// value of its window written beside it, the line drawn from the one (top) to the other
// (bottom).
func (b *browser) sparkScales(what string) {
	b.t.Helper()
	raw := b.eval(`JSON.stringify((() => {
		const out = [];
		for (const svg of document.querySelectorAll("main section:not([hidden]) svg")) {
			const box = svg.closest(".spark-box"), line = svg.querySelector("polyline");
			const ys = line ? line.getAttribute("points").split(" ").map((p) => parseFloat(p.split(",")[1])) : [];
			out.push({label: svg.getAttribute("aria-label"), min: svg.dataset.min, max: svg.dataset.max,
				shownMax: box && box.querySelector(".scale .max") ? box.querySelector(".scale .max").textContent : null,
				shownMin: box && box.querySelector(".scale .min") ? box.querySelector(".scale .min").textContent : null,
				height: svg.viewBox.baseVal.height, top: Math.min(...ys), bottom: Math.max(...ys), points: ys.length});
		}
		return out;
	})())`)
	var sparks []struct {
		Label, Min, Max, ShownMin, ShownMax string
		Height, Top, Bottom                 float64
		Points                              int
	}
	if err := jsonUnmarshal(raw, &sparks); err != nil {
		b.t.Fatalf("%s: %v", raw, err)
	}
	if len(sparks) == 0 {
		b.t.Fatalf("%s: no sparklines", what)
	}
	for _, s := range sparks {
		lo, err1 := strconv.ParseFloat(s.Min, 64)
		hi, err2 := strconv.ParseFloat(s.Max, 64)
		shownLo, err3 := strconv.ParseFloat(strings.ReplaceAll(s.ShownMin, ",", ""), 64)
		shownHi, err4 := strconv.ParseFloat(strings.ReplaceAll(s.ShownMax, ",", ""), 64)
		switch {
		case err1 != nil || err2 != nil || err3 != nil || err4 != nil:
			b.t.Errorf("%s: %q has no scale: min %q max %q, shown %q and %q", what, s.Label, s.Min, s.Max, s.ShownMin, s.ShownMax)
		case math.Abs(shownLo-lo) > 0.051 || math.Abs(shownHi-hi) > 0.051 || lo > hi:
			b.t.Errorf("%s: %q shows %v–%v for values from %v to %v", what, s.Label, shownLo, shownHi, lo, hi)
		case !strings.Contains(s.Label, "from "+s.ShownMin+" to "+s.ShownMax):
			b.t.Errorf("%s: the label %q does not say the scale %s–%s", what, s.Label, s.ShownMin, s.ShownMax)
		case s.Points > 1 && lo < hi && (s.Top > 2.01 || s.Bottom < s.Height-2.01):
			b.t.Errorf("%s: %q runs from y=%v to y=%v of %v: not from its highest to its lowest value", what, s.Label, s.Top, s.Bottom, s.Height)
		}
	}
}

func gaps(ds []sinktest.Delivery) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(ds); i++ {
		out = append(out, ds[i].At.Sub(ds[i-1].At))
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

type contrast struct {
	what, fg, bg string
	ratio        float64
}

// contrasts reads the computed colours of the page's kinds of text and their backgrounds.
func contrasts(t *testing.T, b *browser) []contrast {
	t.Helper()
	raw := b.eval(`JSON.stringify((() => {
		const bg = (el) => { for (let e = el; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
			if (c && c !== "rgba(0, 0, 0, 0)" && c !== "transparent") return c; } return getComputedStyle(document.documentElement).backgroundColor; };
		const pick = (what, sel) => { const el = document.querySelector(sel); return el ? [what, getComputedStyle(el).color, bg(el)] : null; };
		return [pick("body text", "main td"), pick("muted text", ".hint"), pick("link", "main a"), pick("table header", "th"),
			pick("button", "nav button"), pick("badge", ".badge")].filter(Boolean);
	})())`)
	var rows [][3]string
	if err := jsonUnmarshal(raw, &rows); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var out []contrast
	for _, r := range rows {
		out = append(out, contrast{what: r[0], fg: r[1], bg: r[2], ratio: contrastRatio(r[1], r[2])})
	}
	if len(out) < 5 {
		t.Fatalf("found only %d kinds of text: %s", len(out), raw)
	}
	return out
}

// contrastRatio is WCAG 2's contrast of two CSS rgb()/rgba() colours.
func contrastRatio(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

func luminance(c string) float64 {
	c = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(c, "rgba("), "rgb("), ")")
	parts := strings.Split(c, ",")
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		if i >= len(parts) {
			return 0
		}
		v, _ := strconv.ParseFloat(strings.TrimSpace(parts[i]), 64)
		v /= 255
		if v <= 0.03928 {
			v /= 12.92
		} else {
			v = math.Pow((v+0.055)/1.055, 2.4)
		}
		l += w * v
	}
	return l
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
