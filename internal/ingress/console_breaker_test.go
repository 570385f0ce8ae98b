package ingress_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// TestConsoleBreakerInBrowser: a rule with sink.breaker whose breaker one of two drainers
// published as open (what a drainer writes on the change, queue.BreakerRecord): the queues
// page shows a "Breaker open" badge next to the queue's state, the queue's page a "Sink
// breaker" fact (open, on how many of the drainers) and the next probe; once the record says closed, the
// badge goes. A rule without sink.breaker shows neither.
func TestConsoleBreakerInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 200, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:9/orders", breaker: {failures: 4}}
  - key: carrier
    name: plain
    queue: {capacity: 200, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:9/plain"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-admin-token", consoleToken, "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	base := "http://" + m.Addr.String()
	s, err := queue.NewScheduler(r.Client(t), queue.SchedulerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	publish := func(drainer, state string, probe time.Time) {
		t.Helper()
		if err := s.Steering.SetBreaker(context.Background(), "orders", queue.BreakerRecord{Drainer: drainer, State: state, Since: now,
			NextProbe: probe, Expires: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("drainer-1", "open", now.Add(30*time.Second))
	publish("drainer-2", "closed", time.Time{})

	b.do("open the console", chromedp.Navigate(base+"/ui"))
	b.wait("the sign-in form", `!document.getElementById("signin").hidden`)
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), consoleToken), chromedp.KeyEvent(kb.Enter))
	b.wait("the queues page", `!document.getElementById("page-queues").hidden && document.querySelector('tr[data-queue="plain"]') !== null`)
	b.wait("the breaker badge", `document.querySelector('tr[data-queue="orders"] td[data-field="state"]').textContent.includes("Breaker open")`)
	if got := b.eval(`document.querySelector('tr[data-queue="plain"] td[data-field="state"]').textContent`); got != "Running" {
		t.Errorf("the rule without sink.breaker reads %q, want Running", got)
	}
	b.shot("queues-breaker")
	b.do("open the queue", chromedp.Navigate(base+"/ui/#/queue/orders"))
	b.wait("the queue page", `!document.getElementById("page-queue").hidden && document.getElementById("q-title").textContent === "orders"`)
	b.wait("the breaker fact", `document.getElementById("q-facts").textContent.includes("Sink breaker")`)
	fact := b.eval(`document.getElementById("q-facts").textContent`)
	if !strings.Contains(fact, "Sink breakerOpen, 1 of 2 drainers") || !strings.Contains(fact, "Next probe") {
		t.Errorf("the queue page's facts read %q, want the breaker open on 1 of 2 drainers and its next probe", fact)
	}
	b.shot("queue-breaker")

	publish("drainer-1", "closed", time.Time{})
	b.do("back to the queues", chromedp.Navigate(base+"/ui/#/queues"))
	b.wait("the badge gone", `(() => { const c = document.querySelector('tr[data-queue="orders"] td[data-field="state"]');
		return c !== null && c.textContent === "Running"; })()`)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("console errors: %v", errs)
	}
}
