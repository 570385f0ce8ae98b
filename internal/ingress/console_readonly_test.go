package ingress_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// A read token signs in to a console without controls that change anything (and the API
// would refuse them with 403 anyway); an operate token sees them.
func TestConsoleReadOnly(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	os.WriteFile(tokens, []byte("viewer read "+viewerSecret+"\nalice operate "+opsSecret+"\n"), 0o600)
	m := startWith(t, io.Discard, "-admin-tokens", tokens)
	base := "http://" + m.Addr.String()

	visible := func(sel string) bool {
		return b.eval(`(() => { const e = document.querySelector(`+"`"+sel+"`"+`); return String(!!e && e.offsetParent !== null); })()`) == "true"
	}
	signIn := func(token string) {
		b.do("open the console", chromedp.Navigate(base+"/ui/#/queues"))
		b.wait("the sign-in form", `!document.getElementById("signin").hidden`)
		b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.KeyEvent(kb.Enter))
		b.wait("the queues page", `!document.getElementById("page-queues").hidden`)
		b.wait("whoami", `document.getElementById("whoami").textContent !== ""`)
		b.do("open the queue", chromedp.Navigate(base+"/ui/#/queue/orders"))
		b.wait("the queue page", `!document.getElementById("page-queue").hidden`)
	}

	signIn(viewerSecret)
	if got := b.eval(`document.getElementById("whoami").textContent`); got != "viewer (read only)" {
		t.Errorf("whoami shows %q", got)
	}
	for _, sel := range []string{"#q-pause", "#q-reset", "#outflow-form", "#purge-form"} {
		if visible(sel) {
			t.Errorf("read token: %s is shown", sel)
		}
	}
	b.do("open the dead letters", chromedp.Navigate(base+"/ui/#/dead"))
	b.wait("the dead-letters page", `!document.getElementById("page-dead").hidden`)
	if visible("#dead-replay-all") {
		t.Error("read token: replay all is shown")
	}
	if !visible("#dead") {
		t.Error("read token: the dead letters table is not shown")
	}
	b.shot("read-only-dead")
	b.do("sign out", chromedp.Click(chromedp.ID("signout")))

	signIn(opsSecret)
	if got := b.eval(`document.getElementById("whoami").textContent`); got != "alice" {
		t.Errorf("whoami shows %q", got)
	}
	for _, sel := range []string{"#q-pause", "#q-reset", "#outflow-form", "#purge-form"} {
		if !visible(sel) {
			t.Errorf("operate token: %s is not shown", sel)
		}
	}
	if errs := b.errors("401"); len(errs) > 0 {
		t.Fatalf("the browser's console has errors:\n%s", strings.Join(errs, "\n"))
	}
}
