package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/internal/waittest"
	"github.com/sluice-io/sluice/queue"
)

// previousRelease is the release TestRollingUpgrade builds the old binaries from, and
// previousReleaseCommit its commit: the tag is used when the clone has it, the commit
// (which every clone of this history has) when it does not.
const (
	previousRelease       = "v0.3.0"
	previousReleaseCommit = "fc2dc49597d0b5cf1223b42cd4c62ae0bb28ec1d"
)

// TestRollingUpgrade runs the previous release and this one side by side on one JetStream
// cluster and one Redis, as a rolling upgrade does, with a load of messages with
// Idempotency-Keys throughout. Each phase has its own keys and is verified on its own:
// every acknowledged message delivered, in per-key order, under the id it was acknowledged
// with, with its key and payload intact (a misread message would show as a wrong id, key
// or payload, or as lost — dead-lettered), and the outflow held.
//
//	A  old ingress → new drainer; the new drainer is SIGKILLed mid-load with keys held
//	   ("owner#fence next" in Redis) and an old drainer takes over those keys.
//	B  new ingress (Sluice-Format: 2) → old drainer; the old drainer is SIGKILLed with
//	   keys held ("owner next") and the new drainer takes over.
//	C  both versions of each at once (the middle of a rollout).
//
// v0.3.0 has only the claim engine, and a claim drainer and an own drainer would deliver the
// same keys, so this tree's drainers run -engine claim (deprecated, kept for this) while any
// v0.3.0 drainer runs. Then:
//
//	D  the cut-over to the own engine (docs/operations.md), all three steps under load: every
//	   claim drainer stopped (SIGTERM), two own drainers started, then this tree's two
//	   ingresses restarted with -engine own one by one (one own and one claim ingress admit
//	   side by side meanwhile).
//
// It builds the release's commit with `git worktree`, so it runs only when asked (make
// faults).
func TestRollingUpgrade(t *testing.T) {
	if os.Getenv("SLUICE_UPGRADE") == "" {
		t.Skip("builds the previous release from its commit: SLUICE_UPGRADE=1 (make faults)")
	}
	old := buildRelease(t, previousRelease, previousReleaseCommit)

	c := &cluster{t: t, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	c.nats = natstest.StartCluster(t, 3)
	c.natsURL = natstest.ClusterURL(c.nats)
	_, c.js = natstest.Connect(t, c.natsURL)
	c.redis = redistest.Start(t, redistest.Options{TCP: true, AppendOnly: true})
	c.redisURL = c.redis.URL()
	c.sink = sinktest.Start(t)
	c.rulesPath = filepath.Join(t.TempDir(), "rules.yaml")
	c.writeRules(faultRules)
	// As the upgrade steps of docs/operations.md say: new ingresses claim idempotency keys in v0.3's
	// layout too while v0.3 ingresses run.
	// This tree's drainers run the claim engine as long as v0.3.0 drainers run (phase D cuts
	// over to own).
	c.procEnv = []string{"SLUICE_LEGACY_IDEMPOTENCY_KEYS=true", "SLUICE_ENGINE=claim"}
	c.replicas = "3"
	waitR3(t, c.js)

	start := func(spec proctest.Spec) *proctest.Proc {
		p := c.startProc(spec)
		if p == nil {
			t.FailNow()
		}
		c.waitReady(p, 60*time.Second)
		return p
	}
	// The old release's flags, from its own integration test (-drain took a string,
	// there was no -status-keep).
	oldIngress := func(name string) *proctest.Proc {
		return start(proctest.Spec{Name: name, Bin: filepath.Join(old, "ingress"), ReadyMsg: "ingress: listening", Args: []string{
			"-rules", c.rulesPath, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", c.natsURL, "-redis", c.redisURL,
			"-admin-token", adminToken, "-replicas", "3", "-drain", "false", "-shutdown-timeout", "3s",
			"-log-format", "json", "-rules-poll", "250ms"}})
	}
	oldDrainer := func(name string) *proctest.Proc {
		return start(proctest.Spec{Name: name, Bin: filepath.Join(old, "drainer"), ReadyMsg: "drainer: running", Args: []string{
			"-rules", c.rulesPath, "-http", "127.0.0.1:0", "-nats", c.natsURL, "-redis", c.redisURL,
			"-workers", "16", "-replicas", "3", "-shutdown-timeout", "3s", "-log-format", "json", "-rules-poll", "250ms"}})
	}
	newIngress := func(name string) *proctest.Proc {
		p := c.newIngress(name)
		if p == nil {
			t.FailNow()
		}
		c.waitReady(p, 60*time.Second)
		return p
	}
	newDrainer := func(name string) *proctest.Proc {
		p := c.newDrainer(name, 16)
		if p == nil {
			t.FailNow()
		}
		c.waitReady(p, 60*time.Second)
		return p
	}

	const keys, interval, run = 10, 200 * time.Millisecond, 3 * time.Second
	var rows []upgradeRow
	phase := func(name, prefix, what string, handover func(l *loadGen)) {
		t.Helper()
		l := newLoad(c, "faults", "account_id", prefix, keys, interval)
		// With two ingresses, both get load again once a restarted one is back, and a
		// restart meets requests whatever its length.
		l.home, l.spread = true, true
		l.start()
		t.Cleanup(l.halt)
		if !waittest.Within(60*time.Second, func() bool { return len(keysOf(mineOf(c.sink.Accepted(), prefix))) == keys }) {
			t.Fatalf("phase %s: no steady flow: %s; %d delivered", name, l.stats(), len(mineOf(c.sink.Accepted(), prefix)))
		}
		time.Sleep(run)
		if handover != nil {
			handover(l)
			time.Sleep(run)
		}
		l.halt()
		v := l.verify(2 * time.Minute)
		r := upgradeRow{Phase: name, What: what, V: v}
		all := mineOf(c.sink.All(), prefix)
		// The outflow: never more than 21 of one key within a second fails the test; two
		// attempts closer than 50 ms less the arrival jitter are counted per drainer version
		// and reported (v0.3.0 drainers make them after a handover, see docs/operations.md).
		for key, ds := range keysOf(all) {
			n := maxInWindow(ds, time.Second)
			if n > 21 {
				t.Errorf("phase %s: outflow: %d deliveries of %s within one second at 20/s", name, n, key)
			}
			r.V.MaxPerSecond = max(r.V.MaxPerSecond, n)
		}
		r.Misread, r.Example = misread(l, mineOf(c.sink.Accepted(), prefix))
		by := func(d sinktest.Delivery) string {
			if d.Header.Get("Sluice-Fence") != "" {
				return "new"
			}
			return "old"
		}
		stallAt := ""
		for key, ds := range keysOf(mineOf(c.sink.Accepted(), prefix)) {
			for i := 1; i < len(ds); i++ {
				if g := ds[i].At.Sub(ds[i-1].At); g > r.Stall {
					r.Stall = g
					stallAt = fmt.Sprintf("%s from %s (%s drainer) to %s (%s drainer)", key, ds[i-1].At.Format("15:04:05.000"), by(ds[i-1]),
						ds[i].At.Format("15:04:05.000"), by(ds[i]))
				}
			}
		}
		t.Logf("phase %s: longest gap %v: %s", name, r.Stall.Round(10*time.Millisecond), stallAt)
		// Two attempts of one key closer than the outflow allows: say who made them.
		for key, ds := range keysOf(all) {
			for i := 1; i < len(ds); i++ {
				if g := ds[i].At.Sub(ds[i-1].At); g < 50*time.Millisecond-arrivalJitter {
					if by(ds[i]) == "new" {
						r.CloseNew++
					} else {
						r.CloseOld++
					}
					t.Logf("phase %s: %s delivered %v apart: %s attempt %d by the %s drainer (answered %d), then %s attempt %d by the %s drainer", name, key, g,
						ds[i-1].ID, ds[i-1].Attempt, by(ds[i-1]), ds[i-1].Answered, ds[i].ID, ds[i].Attempt, by(ds[i]))
				}
			}
		}
		if r.CloseNew > 0 {
			t.Errorf("phase %s: %d attempts by this version's drainers closer than the outflow allows (50 ms less %v jitter)", name, r.CloseNew, arrivalJitter)
		}
		if r.CloseOld > 0 {
			t.Logf("phase %s: %d attempts by %s drainers closer than the outflow allows", name, r.CloseOld, previousRelease)
		}
		for _, d := range all {
			if by(d) == "new" {
				r.ByNew++
			} else {
				r.ByOld++
			}
		}
		t.Logf("phase %s (%s): load %s; acknowledged %d, delivered %d, lost %d, reordered %d, duplicated %d (%d under another id), misread %d %s; attempts by new drainers %d, by old %d; most of one key in 1 s %d; longest gap between two deliveries of a key %v",
			name, what, l.stats(), v.Acked, v.Delivered, v.Lost, v.Reordered, v.Duplicated, v.ForeignDuplicates, r.Misread, r.Example, r.ByNew, r.ByOld, r.V.MaxPerSecond, r.Stall.Round(10*time.Millisecond))
		for _, p := range append(append([]*proctest.Proc{}, c.ingress...), c.drainers...) {
			if n, first := errorLines(p.LogPath()); n > 0 {
				t.Logf("phase %s: %s logged %d errors, first: %s", name, p.Name(), n, first)
			}
		}
		switch {
		case v.Acked == 0:
			t.Errorf("phase %s: nothing acknowledged", name)
		case v.Lost > 0:
			t.Errorf("phase %s: %d acknowledged messages lost, e.g. %v", name, v.Lost, v.Missing[:min(5, len(v.Missing))])
		}
		if v.Reordered > 0 || v.ForeignDuplicates > 0 || r.Misread > 0 {
			t.Errorf("phase %s: %d reordered, %d under another id, %d misread %s", name, v.Reordered, v.ForeignDuplicates, r.Misread, r.Example)
		}
		if n := l.other.Load(); n > 0 {
			t.Errorf("phase %s: %d unexpected answers, last %v", name, n, l.lastOther.Load())
		}
		rows = append(rows, r)
	}

	// A: the drainers are upgraded first; the old ingress still writes format 1.
	ingOld := oldIngress("ingress-" + previousRelease)
	drNew := newDrainer("drainer-new")
	c.ingress, c.drainers = []*proctest.Proc{ingOld}, []*proctest.Proc{drNew}
	var drOld *proctest.Proc
	phase("A", "a-", "old ingress → new drainer; new drainer SIGKILLed holding keys, an old drainer takes them over", func(*loadGen) {
		killHolding(t, c, drNew)
		drOld = oldDrainer("drainer-" + previousRelease)
	})
	if drOld == nil {
		t.FailNow()
	}
	if !drOld.Running() {
		t.Fatalf("the old drainer exited")
	}

	// B: the reverse order — the ingresses first; the old drainer reads format 2.
	ingNew := newIngress("ingress-new")
	if err := ingOld.Term(10 * time.Second); err != nil {
		t.Errorf("old ingress on SIGTERM: %v", err)
	}
	c.ingress, c.drainers = []*proctest.Proc{ingNew}, []*proctest.Proc{drOld}
	phase("B", "b-", "new ingress → old drainer; old drainer SIGKILLed holding keys, the new drainer takes them over", func(*loadGen) {
		killHolding(t, c, drOld)
		if err := drNew.Restart(); err != nil {
			t.Fatal(err)
		}
		c.waitReady(drNew, 60*time.Second)
	})

	// C: the middle of a rollout: both versions of each process at once.
	if err := ingOld.Restart(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(ingOld, 60*time.Second)
	if err := drOld.Restart(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(drOld, 60*time.Second)
	c.ingress, c.drainers = []*proctest.Proc{ingNew, ingOld}, []*proctest.Proc{drNew, drOld}
	phase("C", "c-", "old and new ingress, old and new drainer, all at once", nil)
	idem := repeatAcross(t, c)
	for _, p := range []*proctest.Proc{ingOld, ingNew, drOld, drNew} {
		if !p.Running() {
			t.Errorf("%s exited", p.Name())
		}
	}
	// What a mixed fleet leaves: an old process that starts rewrites the streams in its
	// own configuration (no byte limit or direct gets on queue streams, DiscardOld on the
	// dead letters); the new processes write theirs again when they next start.
	mixed := streamConfigs(t, c)
	t.Logf("stream configurations after the old processes started: %s", mixed)
	for _, p := range []*proctest.Proc{ingOld, drOld} {
		if err := p.Term(10 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v", p.Name(), err)
		}
	}
	for _, p := range []*proctest.Proc{ingNew, drNew} {
		if err := p.Term(10 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v", p.Name(), err)
		}
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		c.waitReady(p, 60*time.Second)
	}
	after := streamConfigs(t, c)
	t.Logf("stream configurations once the new processes restarted: %s", after)
	if strings.Contains(after, "old") {
		t.Errorf("a stream keeps the old release's configuration after the new processes restarted: %s", after)
	}

	// D: the cut-over from the claim engine to the own engine, the three steps of
	// docs/operations.md: stop every claim drainer (a soft stop hands its keys back), start
	// own drainers, then restart the ingresses with -engine own one by one. Admission goes
	// on throughout, spread over two ingresses of this tree; the keys wait while no drainer
	// runs. A second claim ingress joins first, so that one ingress admits under own while
	// the other still admits under claim (the docs allow both settings meanwhile).
	ingNew2 := newIngress("ingress-new-2") // c.procEnv: claim, as ingNew
	c.ingress, c.drainers = []*proctest.Proc{ingNew, ingNew2}, []*proctest.Proc{drNew}
	c.procEnv = []string{"SLUICE_ENGINE=own"} // the drainers started from here on
	// The ingresses' restart changes the engine alone (the legacy idempotency claims stay
	// until the idempotency TTL has passed, as docs/operations.md says).
	ownIngressEnv := []string{"SLUICE_LEGACY_IDEMPOTENCY_KEYS=true", "SLUICE_ENGINE=own"}
	rdb := c.redis.Client(t)
	sched, err := queue.NewScheduler(rdb, queue.SchedulerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dueKey := "sl:{" + queue.RuleToken("faults") + "}:due" // one Redis: the rule's single partition
	// redisMarks is what Redis holds for key of rule faults in the claim engine's layout:
	// its depth counter (0: none), whether it has a due mark.
	redisMarks := func(key string) (depth int64, due bool) {
		ctx := t.Context()
		depth, _ = rdb.HGet(ctx, sched.Depths.DepthKey("faults", key), key).Int64()
		_, zerr := rdb.ZScore(ctx, dueKey, key).Result()
		return depth, zerr == nil
	}
	// probe admits one plain message (no Idempotency-Key, a key of its own) through ingress
	// i, waits until the sink has it, and says what the admission left in Redis. A claim
	// ingress counts the message into its key's depth before it answers and marks the key
	// due; the own drainers neither read nor remove either. An own ingress writes neither:
	// its admission is the publish alone.
	probes := 0
	probe := func(i int) (depth int64, due bool) {
		probes++
		key := fmt.Sprintf("probe-%s-%d", c.ingress[i].Name(), probes)
		r := c.submit(i, "faults", []kv{{"account_id", key}}, `{"probe":true}`, "")
		if r.Code != 202 {
			t.Errorf("probe through %s: %d %v %v", c.ingress[i].Name(), r.Code, r.Body, r.Err)
			return 0, false
		}
		if got := c.waitIDs([]string{r.str("id")}, 30*time.Second); len(got) != 1 {
			t.Errorf("probe %s through %s not delivered within 30 s", key, c.ingress[i].Name())
		}
		return redisMarks(key)
	}
	var swapNotes []string
	// swap restarts ingress i with -engine own under the load: SIGTERM (a soft stop), the
	// same address, its env's engine changed. Clients of its keys retry on the other
	// ingress meanwhile and come back once it answers.
	swap := func(l *loadGen, i int) {
		p := c.ingress[i]
		if depth, due := probe(i); depth == 0 || !due {
			t.Errorf("%s before its restart (claim): a plain admission left depth counter %d, due mark %v in Redis, want both: the check after the restart would not tell the engines apart", p.Name(), depth, due)
		}
		stopped := time.Now()
		if err := p.Term(10 * time.Second); err != nil {
			t.Errorf("%s (claim) on SIGTERM: %v", p.Name(), err)
		}
		if err := p.RestartWith(ownIngressEnv); err != nil {
			t.Fatal(err)
		}
		c.waitReady(p, 60*time.Second)
		back := time.Now()
		if depth, due := probe(i); depth != 0 || due {
			t.Errorf("%s restarted with -engine own: a plain admission left depth counter %d, due mark %v in Redis: it still admits as the claim engine", p.Name(), depth, due)
		}
		if !waittest.Within(30*time.Second, func() bool { return l.lastAckBy(i).After(back) }) {
			t.Errorf("no message of the load acknowledged by %s within 30 s of its restart with -engine own", p.Name())
		}
		swapNotes = append(swapNotes, fmt.Sprintf("%s down %.1f s (SIGTERM to ready)", p.Name(), back.Sub(stopped).Seconds()))
		t.Logf("phase D: %s restarted with -engine own at %s, down %v; admits the load again", p.Name(), stopped.Format("15:04:05.000"), back.Sub(stopped).Round(10*time.Millisecond))
	}
	var ackGap time.Duration
	var swapUnanswered int64
	var swapFrom, swapTo time.Time
	phase("D", "e-", "cut-over to the own engine: the claim drainer stopped (SIGTERM), two own drainers started, then the two ingresses restarted with `-engine own` one by one (3 s with one own and one claim ingress)", func(l *loadGen) {
		if err := drNew.Term(10 * time.Second); err != nil {
			t.Errorf("claim drainer on SIGTERM: %v", err)
		}
		ownFrom := time.Now()
		c.drainers = []*proctest.Proc{newDrainer("drainer-own-1"), newDrainer("drainer-own-2")}
		t.Logf("phase D: claim drainer stopped at %s, own drainers ready at %s", ownFrom.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
		// Step 3 once the own drainers deliver every key.
		if !waittest.Within(60*time.Second, func() bool {
			n := 0
			for _, ds := range keysOf(mineOf(c.sink.Accepted(), "e-")) {
				if ds[len(ds)-1].At.After(ownFrom) {
					n++
				}
			}
			return n == keys
		}) {
			t.Fatalf("phase D: the own drainers did not deliver every key within 60 s: %s", l.stats())
		}
		var unanswered int64
		swapFrom, unanswered = time.Now(), l.noAnswer.Load()
		swap(l, 0)
		mixedFrom := time.Now()
		time.Sleep(run) // the load runs through one own and one claim ingress; not an assertion
		for i, p := range c.ingress {
			if !l.lastAckBy(i).After(mixedFrom) {
				t.Errorf("phase D: %s acknowledged nothing of the load while one ingress ran own and the other claim", p.Name())
			}
		}
		swap(l, 1)
		// Clients of a stopped ingress retry on the other: admission never pauses for long.
		swapTo = time.Now()
		ackGap, swapUnanswered = l.longestAckGap(swapFrom, swapTo), l.noAnswer.Load()-unanswered
		t.Logf("phase D: ingresses restarted from %s to %s; longest time without any 202 meanwhile: %v", swapFrom.Format("15:04:05.000"),
			swapTo.Format("15:04:05.000"), ackGap.Round(10*time.Millisecond))
		if ackGap > 2*time.Second {
			t.Errorf("phase D: no message of the load acknowledged for %v while the ingresses were restarted one by one", ackGap.Round(10*time.Millisecond))
		}
	})
	for _, p := range append(append([]*proctest.Proc{}, c.ingress...), c.drainers...) {
		if !p.Running() {
			t.Errorf("%s exited", p.Name())
		}
	}
	// What the ingress restarts cost the deliveries: the longest gap between two deliveries
	// of a key that spans part of the restarts (the load sends one every 200 ms).
	swapGap, swapGapAt := time.Duration(0), ""
	for key, ds := range keysOf(mineOf(c.sink.Accepted(), "e-")) {
		for i := 1; i < len(ds); i++ {
			if g := ds[i].At.Sub(ds[i-1].At); ds[i].At.After(swapFrom) && ds[i-1].At.Before(swapTo) && g > swapGap {
				swapGap, swapGapAt = g, fmt.Sprintf("%s from %s to %s", key, ds[i-1].At.Format("15:04:05.000"), ds[i].At.Format("15:04:05.000"))
			}
		}
	}
	t.Logf("phase D: longest gap between two deliveries of a key across the ingress restarts %v: %s", swapGap.Round(10*time.Millisecond), swapGapAt)
	// What the claim ingresses left behind: the marks and counters of messages they admitted
	// while the own drainers ran, which nothing reads or removes any more (measured, reported).
	leftDepth, leftDue, maxDepth := 0, 0, int64(0)
	for k := range keys {
		depth, due := redisMarks(fmt.Sprintf("e-%03d", k))
		if depth > 0 {
			leftDepth++
			maxDepth = max(maxDepth, depth)
		}
		if due {
			leftDue++
		}
	}
	swapNote := fmt.Sprintf("Phase D's ingress restarts (`-engine claim` → `-engine own`, one by one, the load spread over both ingresses, a request the stopped one did not answer retried on the other): %s; %d requests unanswered and retried; longest time without any 202 meanwhile %v, longest gap between two deliveries of a key across the restarts %v; a plain admission left a depth counter and a due mark in Redis through each ingress before its restart and neither after. Left in Redis by the claim ingresses after the cut-over (nothing reads or removes them under the own engine): %d of the phase's %d keys with a depth counter (up to %d, the keys being empty), %d with a due mark.",
		strings.Join(swapNotes, ", "), swapUnanswered, ackGap.Round(10*time.Millisecond), swapGap.Round(10*time.Millisecond), leftDepth, keys, maxDepth, leftDue)
	t.Log(swapNote)
	writeUpgradeTable(t, rows, mixed, after, idem, swapNote)
}

// repeatAcross submits a message with an Idempotency-Key to one version's ingress and
// repeats it, same body, to the other's; c.ingress is {new, old}. The two versions keep
// their claims under different Redis keys (v0.3.0 sl:idem:{rule}:<k>, this tree
// sl:{t}:idem:<k>); with -legacy-idempotency-keys the new ingress claims both, so each
// repeat must answer the first submission's id and nothing may be stored twice.
func repeatAcross(t *testing.T, c *cluster) string {
	t.Helper()
	var notes []string
	for _, dir := range []struct {
		name        string
		first, then int
	}{{"new → old", 0, 1}, {"old → new", 1, 0}} {
		wrong, example := 0, ""
		var ids []string
		for i := range 5 {
			key := fmt.Sprintf("d-%s-%d", dir.name[:3], i)
			body := fmt.Sprintf(`{"k":%q,"seq":0}`, key)
			a := c.submit(dir.first, "faults", []kv{{"account_id", key}}, body, key)
			b := c.submit(dir.then, "faults", []kv{{"account_id", key}}, body, key)
			if a.Code != 202 || (b.Code != 200 && b.Code != 202) {
				t.Errorf("%s: first %d %v, repeat %d %v", dir.name, a.Code, a.Body, b.Code, b.Body)
				continue
			}
			ids = append(ids, a.str("id"))
			if b.str("id") != a.str("id") {
				wrong++
				example = fmt.Sprintf("%q answered as %q", a.str("id"), b.str("id"))
			}
		}
		got := c.waitIDs(ids, time.Minute)
		if len(got) != len(ids) {
			t.Errorf("%s: %d of %d first submissions delivered", dir.name, len(got), len(ids))
		}
		note := fmt.Sprintf("%s: %d of 5 repeats answered another id", dir.name, wrong)
		if example != "" {
			note += " (e.g. " + example + ")"
		}
		twice := 0
		for i := range 5 {
			key := fmt.Sprintf("d-%s-%d", dir.name[:3], i)
			if waittest.Within(10*time.Second, func() bool { return len(deliveriesOf(c.sink.Accepted(), "faults", key)) >= 2 }) {
				twice++
			}
		}
		note += fmt.Sprintf(", %d of 5 stored and delivered twice (under both ids)", twice)
		if wrong > 0 || twice > 0 {
			t.Errorf("idempotency keys %s: %d of 5 repeats answered another id, %d of 5 stored twice, want none%s", dir.name, wrong, twice, example)
		}
		notes = append(notes, note)
	}
	t.Logf("idempotency keys across versions: %s", strings.Join(notes, "; "))
	return strings.Join(notes, "; ")
}

// streamConfigs describes the settings v0.3.0 and this tree write differently: a queue
// stream's byte limit and direct gets, the dead-letter stream's discard policy; "old"
// marks the old release's value.
func streamConfigs(t *testing.T, c *cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	names := c.js.StreamNames(ctx)
	for n := range names.Name() {
		s, err := c.js.Stream(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		switch {
		case n == streamName("faults"):
			d := fmt.Sprintf("%s: max_bytes %d, allow_direct %v", n, cfg.MaxBytes, cfg.AllowDirect)
			if cfg.MaxBytes <= 0 || !cfg.AllowDirect {
				d += " (old)"
			}
			out = append(out, d)
		case strings.Contains(cfg.Description, "dead letters"):
			d := fmt.Sprintf("%s: discard %v", n, cfg.Discard)
			if cfg.Discard == jetstream.DiscardOld {
				d += " (old)"
			}
			out = append(out, d)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

type upgradeRow struct {
	Phase, What  string
	V            verdict
	Misread      int
	Example      string
	ByNew, ByOld int // delivery attempts by new (Sluice-Fence) and old drainers
	Stall        time.Duration
	// attempts closer than the outflow allows (less arrival jitter) to the previous one of
	// their key, by the version of the drainer that made the later one
	CloseNew, CloseOld int
}

// errorLines counts the JSON log lines of level ERROR in a process's log.
func errorLines(path string) (n int, first string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			n++
			if first == "" {
				first = line
			}
		}
	}
	return n, first
}

// killHolding SIGKILLs a drainer while it holds keys: the sink answers 300 ms late until
// at least 3 deliveries are in flight, so their keys stay held (and leased) in Redis in the
// killed drainer's format, for the other version to take back.
func killHolding(t *testing.T, c *cluster, p *proctest.Proc) {
	t.Helper()
	var inflight atomic.Int64
	c.sink.Answer(func(sinktest.Delivery) (int, string) {
		inflight.Add(1)
		defer inflight.Add(-1)
		time.Sleep(300 * time.Millisecond)
		return 200, ""
	})
	if !waittest.Within(30*time.Second, func() bool { return inflight.Load() >= 3 }) {
		t.Fatalf("no deliveries in flight in %s", p.Name())
	}
	p.Kill()
	c.sink.Answer(nil)
	t.Logf("%s SIGKILLed with %d deliveries in flight", p.Name(), inflight.Load())
}

// mineOf is the deliveries of keys that start with prefix.
func mineOf(all []sinktest.Delivery, prefix string) []sinktest.Delivery {
	var out []sinktest.Delivery
	for _, d := range all {
		if d.Rule == "faults" && strings.HasPrefix(d.Key, prefix) {
			out = append(out, d)
		}
	}
	return out
}

// misread counts accepted deliveries whose payload does not belong to their key or whose
// Idempotency-Key is not the id the ingress answered for that payload.
func misread(l *loadGen, accepted []sinktest.Delivery) (n int, example string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range accepted {
		var p struct {
			K   string `json:"k"`
			Seq *int   `json:"seq"`
		}
		bad := ""
		switch {
		case json.Unmarshal(d.Payload, &p) != nil || p.Seq == nil:
			bad = fmt.Sprintf("payload %q", d.Payload)
		case p.K != d.Key:
			bad = fmt.Sprintf("payload of key %q delivered as key %q", p.K, d.Key)
		default:
			if id, ok := l.idOf[p.K+"/"+strconv.Itoa(*p.Seq)]; ok && id != d.ID {
				bad = fmt.Sprintf("%s/%d acknowledged as %s, delivered as %s", p.K, *p.Seq, id, d.ID)
			}
		}
		if bad != "" {
			n++
			if example == "" {
				example = "(e.g. " + bad + ")"
			}
		}
	}
	return n, example
}

func writeUpgradeTable(t *testing.T, rows []upgradeRow, mixed, after, idem, swap string) {
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice rolling upgrade (%s ↔ this tree)\n\n", previousRelease)
	fmt.Fprintf(&b, "Produced by `SLUICE_UPGRADE=1 go test ./integration -run TestRollingUpgrade` on %s: %s built from its commit (`git worktree`), this tree's binaries, one 3-node JetStream cluster (R3), one Redis, a recording HTTP sink; load of 10 keys × 5 msg/s with Idempotency-Keys per phase, outflow 20/s per key. \"misread\" = delivered with another key's payload or under an id other than the one acknowledged for it. Attempts by new drainers carry Sluice-Fence; the old release's do not.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), previousRelease)
	b.WriteString("| phase | processes | acknowledged | delivered | lost | reordered | duplicated | misread | attempts by new / old drainers | most of one key in 1 s (20/s) | attempts < 10 ms after the key's previous, by new / old drainers | longest gap between two deliveries of a key |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d / %d | %d | %d / %d | %.1f s |\n", r.Phase, r.What, r.V.Acked, r.V.Delivered, r.V.Lost,
			r.V.Reordered, r.V.Duplicated, r.Misread, r.ByNew, r.ByOld, r.V.MaxPerSecond, r.CloseNew, r.CloseOld, r.Stall.Seconds())
	}
	fmt.Fprintf(&b, "\n%s\n\nStream configurations after an old process started next to new ones: %s. After the old processes stopped and the new ones restarted: %s.\n\nAn Idempotency-Key submitted to one version's ingress and repeated to the other's: %s.\n", swap, mixed, after, idem)
	t.Log("\n" + b.String())
	if os.Getenv("SLUICE_RESULTS") == "" || t.Failed() {
		return
	}
	if err := os.MkdirAll("results", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("results", "upgrade.md"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildRelease checks the tag out into a temporary git worktree and builds its
// cmd/ingress and cmd/drainer; it returns the directory of the binaries. It skips the test
// when the repository has no such tag (a shallow clone, or tags not fetched).
func buildRelease(t *testing.T, tag, commit string) string {
	t.Helper()
	root, err := proctest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rev := "refs/tags/" + tag + "^{commit}"
	if out, err := exec.Command("git", "-C", root, "rev-parse", "-q", "--verify", rev).Output(); err == nil {
		if got := strings.TrimSpace(string(out)); got != commit {
			t.Fatalf("tag %s is commit %s here, not the release's %s", tag, got, commit)
		}
	} else if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("neither tag %s nor its commit %s in %s (a shallow clone? git fetch --unshallow): %v %s", tag, commit, root, err, out)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", src, commit).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s (%s): %v\n%s", tag, commit, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", src).CombinedOutput(); err != nil {
			t.Logf("git worktree remove %s: %v\n%s", src, err, out)
		}
	})
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/ingress", "./cmd/drainer")
	cmd.Dir = src
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", tag, err, out)
	}
	t.Logf("built %s's ingress and drainer in %v", tag, time.Since(start).Round(time.Second))
	return bin
}
