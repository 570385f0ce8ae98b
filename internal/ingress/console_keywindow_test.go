package ingress_test

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// The queue page's key lookup shows the key's delivery window and where it comes from:
// the key's override (with its end), or the rule's ("any time" for a rule without one).
func TestConsoleKeyLookupShowsWindow(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := start(t, nil)
	if r := e.admin("PATCH", "/v1/admin/queues/orders/keys/m-42", `{"window":"mon-fri 09:00-18:00 Europe/Paris","for":"24h"}`); r.code != 200 {
		t.Fatalf("patch: %d %s", r.code, r.raw)
	}
	b.do("open the console", chromedp.Navigate(e.base+"/ui"))
	b.do("sign in", chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("sluice-admin-token", "`+e.token+`")`),
		chromedp.Navigate(e.base+"/ui/#/queue/orders"))
	b.wait("the queue page", `!document.getElementById("page-queue").hidden && document.getElementById("q-title").textContent === "orders"`)
	b.do("look up the key", chromedp.SendKeys(chromedp.ID("key-name"), "m-42"), chromedp.Click(chromedp.CSS(`#key-form button`)))
	b.wait("the key's window", `document.getElementById("key-facts").textContent.includes("Window from")`)
	facts := b.eval(`document.getElementById("key-facts").textContent`)
	for _, want := range []string{"Windowmon-fri 09:00–18:00 Europe/Paris", "Window fromkey override until ", "Fromrule"} {
		if !contains(facts, want) {
			t.Errorf("facts %q lack %q", facts, want)
		}
	}
	b.do("another key", chromedp.SetValue(chromedp.ID("key-name"), "m-7"), chromedp.Click(chromedp.CSS(`#key-form button`)))
	b.wait("the rule's window", `document.getElementById("key-facts").textContent.includes("Windowany timeWindow fromrule")`)
}
