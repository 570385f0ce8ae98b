package ingress_test

import (
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"
)

// The queue page's key lookup shows a key's effective outflow and where it comes from,
// as text (a key with markup in it stays text).
func TestConsoleKeyLookupShowsSource(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	e := start(t, nil)
	key := `<b>m-42</b>`
	if r := e.admin("PATCH", "/v1/admin/queues/orders/keys/"+url.PathEscape(key), `{"outflow":"20/s","for":"24h"}`); r.code != 200 {
		t.Fatalf("patch: %d %s", r.code, r.raw)
	}
	b.do("open the console", chromedp.Navigate(e.base+"/ui"))
	b.do("sign in", chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("sluice-admin-token", "`+e.token+`")`),
		chromedp.Navigate(e.base+"/ui/#/queue/orders"))
	b.wait("the queue page", `!document.getElementById("page-queue").hidden && document.getElementById("q-title").textContent === "orders"`)
	b.do("look up the key", chromedp.SendKeys(chromedp.ID("key-name"), key), chromedp.Click(chromedp.CSS(`#key-form button`)))
	b.wait("the key's facts", `document.getElementById("key-facts").textContent.includes("key override until")`)
	facts := b.eval(`document.getElementById("key-facts").textContent`)
	for _, want := range []string{"20/second", "From", "key override until ", key} {
		if !contains(facts, want) {
			t.Errorf("facts %q lack %q", facts, want)
		}
	}
	if n := b.eval(`String(document.querySelectorAll("#key-facts b").length)`); n != "0" {
		t.Errorf("the key became markup: %s elements", n)
	}
	b.do("another key", chromedp.SetValue(chromedp.ID("key-name"), "m-7"), chromedp.Click(chromedp.CSS(`#key-form button`)))
	b.wait("the rule's outflow", `document.getElementById("key-facts").textContent.includes("Fromrule")`)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
