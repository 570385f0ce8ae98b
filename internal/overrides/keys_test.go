package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// clock is an injected clock for expiry tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func keyRules(t testing.TB, withOrders bool) *rules.Set {
	t.Helper()
	y := `
domain: orders
descriptors:
  - key: other
    name: other
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:8090/sink/other"}
`
	if withOrders {
		y += `
  - key: merchant_id
    name: orders-per-merchant
    queue:
      capacity: 100
      outflow: {unit: second, requests_per_unit: 10}
      total_outflow: {unit: second, requests_per_unit: 200}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`
	}
	set, err := rules.Parse("orders.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func openKeys(t testing.TB, js jetstream.JetStream, bucket string, clk func() time.Time) *overrides.KeyStore {
	t.Helper()
	s, err := overrides.OpenKeys(ctxFor(t), js, overrides.KeyConfig{Bucket: bucket, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startIndex(t testing.TB, s *overrides.KeyStore, cfg overrides.KeyIndexConfig) *overrides.KeyIndex {
	t.Helper()
	x := overrides.NewKeyIndex(s, cfg)
	if err := x.Start(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Stop)
	return x
}

// waitFor waits on the index's change signal until cond holds, failing after d.
func waitFor(t testing.TB, x *overrides.KeyIndex, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := x.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("condition not met within %v", d)
		}
	}
}

func mustKeyPatch(t testing.TB, body string) overrides.KeyPatch {
	t.Helper()
	p, err := overrides.ParseKeyPatch([]byte(body))
	if err != nil {
		t.Fatalf("ParseKeyPatch(%s): %v", body, err)
	}
	return p
}

func TestKeyKVKeyIsTheQueueKeyToken(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "m-42", "a.b.*.>", "ключ с пробелом", strings.Repeat("x", 256)} {
		if got, want := overrides.KeyKVKey("orders", k), "orders."+queue.KeyToken(k); got != want {
			t.Errorf("KeyKVKey(%q) = %q, want %q", k, got, want)
		}
	}
}

func TestParseKeyPatch(t *testing.T) {
	t.Parallel()
	p := mustKeyPatch(t, `{"outflow":"20/s","for":"24h"}`)
	if p.Outflow == nil || p.Outflow.PerSecond() != 20 || p.For != 24*time.Hour {
		t.Errorf("patch = %+v", p)
	}
	p = mustKeyPatch(t, `{"outflow":{"unit":"minute","requests_per_unit":30},"until":"2030-01-01T00:00:00Z","paused":true}`)
	if p.Outflow.PerSecond() != 0.5 || p.Until == nil || p.Paused == nil {
		t.Errorf("patch = %+v", p)
	}
	for body, field := range map[string]string{
		`{"capacity":5}`: "capacity",
		`{"outflow":"20/s","until":"2030-01-01T00:00:00Z","for":"1h"}`: "for",
		`{"for":"soon"}`:               "for",
		`{"until":"tomorrow"}`:         "until",
		`{"outflow":"0/s"}`:            "outflow",
		`{"reset":true,"paused":true}`: "reset",
		`{"weight":3}`:                 "weight",
	} {
		_, err := overrides.ParseKeyPatch([]byte(body))
		var pe *overrides.PatchError
		if !errors.As(err, &pe) || !errors.Is(err, overrides.ErrInvalidPatch) {
			t.Errorf("%s: err = %v", body, err)
			continue
		}
		found := false
		var pes overrides.PatchErrors
		errors.As(err, &pes)
		for _, e := range pes {
			found = found || e.Field == field
		}
		if !found {
			t.Errorf("%s: no problem names %q: %v", body, field, err)
		}
	}
}

// A per-key override written on one connection is visible through two indexes on two
// other connections (two processes) within 1 s; the other keys keep the rule's outflow.
func TestKeyOverrideVisibleOnTwoWatchersWithinOneSecond(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	bucket := bucketName(t)
	_, js := natstest.Connect(t, node.URL())
	s := openKeys(t, js, bucket, nil)
	var idx []*overrides.KeyIndex
	for range 2 {
		_, js2 := natstest.Connect(t, node.URL())
		idx = append(idx, startIndex(t, openKeys(t, js2, bucket, nil), overrides.KeyIndexConfig{}))
	}
	set := keyRules(t, true)
	r := set.Rule("orders-per-merchant")
	got := make(chan [2]string, 16)
	stop := idx[0].Subscribe(func(rule, key string) { got <- [2]string{rule, key} })
	defer stop()
	start := time.Now()
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"20/s"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if c != [2]string{r.Name, "m-42"} {
			t.Errorf("Subscribe got %v", c)
		}
	case <-time.After(time.Second):
		t.Error("Subscribe: no call within 1 s")
	}
	for i, x := range idx {
		waitFor(t, x, time.Second, func() bool { _, ok := x.Lookup(r.Name, "m-42"); return ok })
		out, paused, src := x.Effective(*r, "m-42", time.Now())
		if out != 20 || paused || src != overrides.SourceKeyOverride {
			t.Errorf("index %d: Effective = %v %v %q", i, out, paused, src)
		}
		if out, _, src := x.Effective(*r, "m-7", time.Now()); out != 10 || src != overrides.SourceRule {
			t.Errorf("index %d: other key = %v %q", i, out, src)
		}
	}
	t.Logf("visible on both indexes %v after the write", time.Since(start))
	// A pause, then a reset, reach them too.
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"paused":true}`)); err != nil {
		t.Fatal(err)
	}
	for _, x := range idx {
		waitFor(t, x, time.Second, func() bool { o, _ := x.Lookup(r.Name, "m-42"); return o.Paused && o.Outflow.PerSecond() == 20 })
	}
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"reset":true}`)); err != nil {
		t.Fatal(err)
	}
	for _, x := range idx {
		waitFor(t, x, time.Second, func() bool { _, ok := x.Lookup(r.Name, "m-42"); return !ok && x.Len() == 0 })
	}
}

// Effective names its source: rule, rule override (a rule-level PATCH), key override
// until T; a rule paused by its override pauses the key whatever the key says.
func TestKeyEffectiveSources(t *testing.T) {
	t.Parallel()
	_, js, rs := newStore(t)
	w := overrides.NewWatcher(rs, overrides.WatcherConfig{})
	if err := w.Start(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	s := openKeys(t, js, bucketName(t), nil)
	x := startIndex(t, s, overrides.KeyIndexConfig{Rules: w})
	r := keyRules(t, true).Rule("orders-per-merchant")
	now := time.Now()
	if out, p, src := x.Effective(*r, "m-42", now); out != 10 || p || src != "rule" {
		t.Errorf("no override: %v %v %q", out, p, src)
	}
	five := rules.Rate{Requests: 5, Interval: time.Second}
	if _, err := rs.Apply(ctxFor(t), r, overrides.Patch{Outflow: &five}); err != nil {
		t.Fatal(err)
	}
	for ch := w.Changed(); ; ch = w.Changed() {
		if o, _ := w.Get(r.Name); o.Outflow != nil {
			break
		}
		<-ch
	}
	if out, _, src := x.Effective(*r, "m-42", now); out != 5 || src != "rule override" {
		t.Errorf("rule override: %v %q", out, src)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42",
		mustKeyPatch(t, fmt.Sprintf(`{"outflow":"20/s","until":%q}`, until.Format(time.RFC3339)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, x, time.Second, func() bool { _, ok := x.Lookup(r.Name, "m-42"); return ok })
	want := "key override until " + until.Format(time.RFC3339)
	if out, p, src := x.Effective(*r, "m-42", now); out != 20 || p || src != want {
		t.Errorf("key override: %v %v %q, want 20 false %q", out, p, src, want)
	}
	yes := true
	if _, err := rs.Apply(ctxFor(t), r, overrides.Patch{Paused: &yes}); err != nil {
		t.Fatal(err)
	}
	for ch := w.Changed(); ; ch = w.Changed() {
		if o, _ := w.Get(r.Name); o.IsPaused() {
			break
		}
		<-ch
	}
	if out, p, src := x.Effective(*r, "m-42", now); out != 20 || !p || src != "rule override" {
		t.Errorf("rule paused: %v %v %q", out, p, src)
	}
}

// An override with an end reads as absent once the end passes (injected clock), and the
// sweeper deletes it from the bucket; a renewed override is not deleted.
func TestKeyOverrideExpires(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	clk := &clock{now: time.Now()}
	s := openKeys(t, js, bucketName(t), clk.Now)
	x := startIndex(t, s, overrides.KeyIndexConfig{SweepEvery: -1})
	r := keyRules(t, true).Rule("orders-per-merchant")
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"20/s","for":"24h"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-43", mustKeyPatch(t, `{"paused":true,"for":"1h"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-44", mustKeyPatch(t, `{"outflow":"2/s"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, x, time.Second, func() bool { return x.Len() == 3 })
	clk.Add(2 * time.Hour)
	if _, ok := x.Lookup(r.Name, "m-43"); ok {
		t.Error("m-43 still in force after its end")
	}
	if out, p, src := x.Effective(*r, "m-43", clk.Now()); out != 10 || p || src != "rule" {
		t.Errorf("m-43 after its end: %v %v %q", out, p, src)
	}
	if _, ok := x.Lookup(r.Name, "m-42"); !ok {
		t.Error("m-42 ended early")
	}
	if o, ok, err := s.GetKey(ctxFor(t), r.Name, "m-43"); err != nil || ok {
		t.Errorf("GetKey(m-43) = %v %v %v", o, ok, err)
	}
	// A patch after the end starts afresh: it does not revive paused.
	clk.Add(23 * time.Hour)
	if exp, rem := x.Sweep(ctxFor(t), nil); exp != 2 || rem != 0 {
		t.Errorf("Sweep = %d expired, %d removed; want 2, 0", exp, rem)
	}
	waitFor(t, x, time.Second, func() bool { return x.Len() == 1 })
	if _, ok := x.Lookup(r.Name, "m-44"); !ok {
		t.Error("m-44 (no end) swept")
	}
	kv, _ := js.KeyValue(ctxFor(t), s.Bucket())
	if _, err := kv.Get(ctxFor(t), overrides.KeyKVKey(r.Name, "m-42")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("m-42 still stored: %v", err)
	}
}

// 10,000 keys in one bulk write reach an index, and are all readable.
func TestKeyOverridesBulk10000(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	s := openKeys(t, js, bucketName(t), nil)
	x := startIndex(t, s, overrides.KeyIndexConfig{})
	r := keyRules(t, true).Rule("orders-per-merchant")
	ws := make([]overrides.KeyWrite, 10000)
	for i := range ws {
		ws[i] = overrides.KeyWrite{Key: fmt.Sprintf("m-%d", i), Override: overrides.KeyOverride{Outflow: rules.Rate{Requests: int64(1 + i%9), Interval: time.Second}}}
	}
	start := time.Now()
	n, err := s.PutKeys(ctxFor(t), r.Name, ws)
	if err != nil || n != len(ws) {
		t.Fatalf("PutKeys = %d, %v", n, err)
	}
	t.Logf("10,000 keys written in %v", time.Since(start))
	waitFor(t, x, 20*time.Second, func() bool { return x.Len() == len(ws) })
	t.Logf("10,000 keys written and indexed in %v", time.Since(start))
	for _, i := range []int{0, 4711, 9999} {
		o, ok := x.Lookup(r.Name, fmt.Sprintf("m-%d", i))
		if !ok || o.Outflow.Requests != int64(1+i%9) {
			t.Errorf("m-%d = %v %v", i, o, ok)
		}
	}
	// A second index (a process starting now) reads all of them before Start returns.
	_, js2 := natstest.Connect(t, node.URL())
	if y := startIndex(t, openKeys(t, js2, s.Bucket(), nil), overrides.KeyIndexConfig{}); y.Len() != len(ws) {
		t.Errorf("a new index holds %d", y.Len())
	}
}

// When a rule leaves the rules set its key overrides are deleted by the sweeper; a
// re-added rule starts clean. Overrides of the other rules stay.
func TestKeyOverridesRemovedWithTheirRule(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	s := openKeys(t, js, bucketName(t), nil)
	var mu sync.Mutex
	cur := keyRules(t, true)
	current := func() *rules.Set { mu.Lock(); defer mu.Unlock(); return cur }
	x := startIndex(t, s, overrides.KeyIndexConfig{CurrentRules: current, RulesCheck: 20 * time.Millisecond})
	r := cur.Rule("orders-per-merchant")
	other := cur.Rule("other")
	for _, k := range []string{"a", "b", "c"} {
		if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, k, mustKeyPatch(t, `{"outflow":"20/s"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.ApplyKey(ctxFor(t), other, overrides.Override{}, "a", mustKeyPatch(t, `{"paused":true}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, x, time.Second, func() bool { return x.Len() == 4 })
	waittest.NextMillisecond() // UpdatedAt has millisecond resolution: the removal comes after
	mu.Lock()
	cur = keyRules(t, false)
	mu.Unlock()
	waitFor(t, x, 5*time.Second, func() bool { return x.Len() == 1 })
	if _, ok := x.Lookup("other", "a"); !ok {
		t.Error("the other rule's override went too")
	}
	mu.Lock()
	cur = keyRules(t, true)
	mu.Unlock()
	if len(x.Keys(r.Name, time.Now())) != 0 {
		t.Error("re-added rule has overrides")
	}
}

// Overrides survive a restart of the NATS server (file storage) and of the index.
func TestKeyOverridesSurviveRestart(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	bucket := bucketName(t)
	s := openKeys(t, js, bucket, nil)
	r := keyRules(t, true).Rule("orders-per-merchant")
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"20/s","for":"24h"}`)); err != nil {
		t.Fatal(err)
	}
	if err := node.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := natstest.WaitJetStream(node.URL(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	_, js2 := natstest.Connect(t, node.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s2 *overrides.KeyStore
	var openErr error
	if !waittest.Within(30*time.Second, func() bool {
		s2, openErr = overrides.OpenKeys(ctx, js2, overrides.KeyConfig{Bucket: bucket})
		return openErr == nil
	}) {
		t.Fatal(openErr)
	}
	x := startIndex(t, s2, overrides.KeyIndexConfig{})
	if o, ok := x.Lookup(r.Name, "m-42"); !ok || o.Outflow.PerSecond() != 20 || o.Until.IsZero() {
		t.Errorf("after restart: %v %v", o, ok)
	}
}

// A key's outflow may not exceed the rule's total_outflow; a check-only rule has no keys.
func TestKeyOverrideChecks(t *testing.T) {
	t.Parallel()
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	s := openKeys(t, js, bucketName(t), nil)
	r := keyRules(t, true).Rule("orders-per-merchant")
	_, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"300/s"}`))
	var pe *overrides.PatchError
	if !errors.As(err, &pe) || pe.Field != "outflow" {
		t.Errorf("300/s over a 200/s total: %v", err)
	}
	_, _, err = s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"2/s","until":"2001-01-01T00:00:00Z"}`))
	if !errors.As(err, &pe) || pe.Field != "until" {
		t.Errorf("until in the past: %v", err)
	}
	_, _, err = s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"for":"1h"}`))
	if !errors.As(err, &pe) || pe.Field != "for" {
		t.Errorf("an end without an override: %v", err)
	}
}

// Lookup is what a drainer calls per delivery: no allocation (not parallel: AllocsPerRun).
func TestKeyLookupDoesNotAllocate(t *testing.T) {
	node := natstest.Start(t)
	_, js := natstest.Connect(t, node.URL())
	s := openKeys(t, js, bucketName(t), nil)
	x := startIndex(t, s, overrides.KeyIndexConfig{})
	r := keyRules(t, true).Rule("orders-per-merchant")
	if _, _, err := s.ApplyKey(ctxFor(t), r, overrides.Override{}, "m-42", mustKeyPatch(t, `{"outflow":"20/s"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, x, time.Second, func() bool { return x.Len() == 1 })
	for _, key := range []string{"m-42", "m-7"} {
		if allocs := testing.AllocsPerRun(1000, func() { x.Lookup(r.Name, key) }); allocs != 0 {
			t.Errorf("Lookup(%s) allocates %v times", key, allocs)
		}
	}
	if allocs := testing.AllocsPerRun(1000, func() { x.Effective(*r, "m-42", time.Now()) }); allocs != 0 {
		t.Errorf("Effective without an end allocates %v times", allocs)
	}
}
