package overrides_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/waittest"
)

// A key's window override: stored and read back by another process's index (the object
// and the text form give the same window), merged with outflow, cleared by window: null,
// and shown by EffectiveWindow with its source — the rule's when the override ends.
func TestKeyWindowOverride(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	bucket := bucketName(t)
	s := openKeys(t, js, bucket, nil)
	x := startIndex(t, s, overrides.KeyIndexConfig{})
	r := keyRules(t, true).Rule("orders-per-merchant")
	obj := mustKeyPatch(t, `{"window":{"days":["mon-fri","sun"],"from":"22:00","to":"06:00","time_zone":"from_message","default_time_zone":"Asia/Seoul"},"for":"1h"}`)
	text := mustKeyPatch(t, `{"window":"mon-fri,sun 22:00-06:00 from_message Asia/Seoul"}`)
	if !obj.Window.Equal(*text.Window) {
		t.Fatalf("object %v, text %v", obj.Window, text.Window)
	}
	after, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-1", obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-1", mustKeyPatch(t, `{"outflow":"2/s"}`)); err != nil {
		t.Fatal(err)
	}
	var got overrides.KeyOverride
	if !waittest.Within(5*time.Second, func() bool { var ok bool; got, ok = x.Lookup(r.Name, "m-1"); return ok && !got.Outflow.Zero() }) {
		t.Fatalf("index: %v", got)
	}
	if got.Window == nil || !got.Window.Equal(*after.Window) || got.Outflow.PerSecond() != 2 {
		t.Fatalf("stored %v, read %v", after, got)
	}
	if v := got.View(); v.Window == nil || v.Window.Text() != "mon-fri,sun 22:00-06:00 from_message Asia/Seoul" {
		t.Errorf("view: %+v", v.Window)
	}
	w, src := overrides.EffectiveWindow(r, got, true)
	if !w.Equal(*got.Window) || !strings.HasPrefix(src, "key override until ") {
		t.Errorf("effective: %v from %q", w, src)
	}
	if o, _, _ := overrides.EffectiveKey(r, overrides.Override{}, overrides.KeyOverride{Window: got.Window}, true); o != r.Queue.Outflow.PerSecond() {
		t.Errorf("a window alone changed the outflow to %v", o)
	}
	if _, src := overrides.EffectiveWindow(r, got, false); src != overrides.SourceRule {
		t.Errorf("ended: from %q", src)
	}
	cleared, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-1", mustKeyPatch(t, `{"window":null}`))
	if err != nil || cleared.Window != nil || cleared.Outflow.PerSecond() != 2 {
		t.Fatalf("window: null = %v %v", cleared, err)
	}
	for body, field := range map[string]string{
		`{"window":{"from":"08:00","to":"24:30","time_zone":"UTC"}}`:           "window.to",
		`{"window":{"from":"08:00","to":"20:00","time_zone":"Local"}}`:         "window.time_zone",
		`{"window":{"days":[],"from":"08:00","to":"20:00","time_zone":"UTC"}}`: "window.days",
		`{"window":3}`: "window",
	} {
		_, err := overrides.ParseKeyPatch([]byte(body))
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}
}
