package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/waittest"
)

// The envoy parity suite, decision half: the request sequences of envoyproxy/ratelimit's
// integration tests and the answers its limiter gives (base_limiter.go, the redis fixed
// window), sent to three ingresses alike — one over gRPC ShouldRateLimit, one over
// POST /v1/check, one over POST /json — each with its own Redis and the same frozen
// clock. Every step's answer must be the expected one on all three. What sluice does
// differently on purpose (all_or_nothing rules, other algorithms) is asserted as
// documented in README "Envoy / Istio". The configuration half is in
// internal/rules/envoy_parity_test.go.

// pdesc is one descriptor of a parity request.
type pdesc struct {
	kv       []string
	hits     *uint64 // the descriptor's own hits_addend
	override *[2]any // requests_per_unit, unit
}

func pd(kv ...string) pdesc { return pdesc{kv: kv} }

func (d pdesc) withHits(n uint64) pdesc { d.hits = &n; return d }

// pwant is one expected descriptor status: "OK", "OVER_LIMIT", then the limit as
// "requests/UNIT" ("-" for none), remaining and reset in whole seconds.
type pwant struct {
	code      string
	limit     string
	remaining uint64
	reset     time.Duration
}

func (w pwant) String() string {
	return fmt.Sprintf("%s %s r=%d t=%v", w.code, w.limit, w.remaining, w.reset)
}

type pstep struct {
	domain string
	hits   uint32
	descs  []pdesc
	over   bool // the overall code
	want   []pwant
}

// parityTrio is three ingresses on the same rules, one per transport.
type parityTrio struct {
	clocks [3]*frozen
	envs   [3]*grpcEnv
	steps  int
}

var transports = [3]string{"gRPC", "/v1/check", "/json"}

func startTrio(t *testing.T, rulesPaths func(i int) string, args ...string) *parityTrio {
	t.Helper()
	p := &parityTrio{}
	for i := range p.envs {
		p.clocks[i] = newFrozen()
		p.envs[i] = startParityEnv(t, rulesPaths(i), p.clocks[i].clock(), args...)
	}
	return p
}

// startParityEnv starts an ingress (real Redis, embedded NATS) on rulesPaths and a gRPC
// client of it. Its limits wait up to 10s for Redis (-limits-redis-timeout; the client's
// read timeout raised to match): at the default 100ms a Redis call slowed by a loaded
// machine put the ingress into degraded mode, whose fresh local counters answered
// "OK … r=19" where the test expects OVER_LIMIT. A caller's own deadline still bounds
// the wait (TestGRPCAnswersWithinDeadlineWhenRedisIsSlow); args given later win.
func startParityEnv(t *testing.T, rulesPaths string, clock func() time.Time, args ...string) *grpcEnv {
	t.Helper()
	patient := func(c *ingress.Config) { // the client's read timeout (500ms) bounds the wait too
		sep := "?"
		if strings.Contains(c.RedisURL, "?") {
			sep = "&"
		}
		c.RedisURL += sep + "read_timeout=10s"
	}
	e := launch(t, rulesPaths, clock, patient, append([]string{"-limits-redis-timeout", "10s"}, args...)...)
	g := &grpcEnv{env: e}
	g.conn = dialGRPC(t, e)
	g.rls = rlsv3.NewRateLimitServiceClient(g.conn)
	return g
}

func (p *parityTrio) add(d time.Duration) {
	for _, c := range p.clocks {
		c.Add(d)
	}
}

// run sends each step to the three transports and requires the expected answer of each.
func (p *parityTrio) run(t *testing.T, steps ...pstep) {
	t.Helper()
	for n, s := range steps {
		want := pwantOverall(s.over) + ":"
		for _, w := range s.want {
			want += " | " + w.String()
		}
		for i, e := range p.envs {
			got := p.ask(t, i, e, s)
			if got != want {
				t.Fatalf("step %d (%s %v) over %s:\n got  %s\n want %s", n+1, s.domain, s.descs, transports[i], got, want)
			}
		}
		p.steps++
	}
}

func pwantOverall(over bool) string {
	if over {
		return "OVER_LIMIT"
	}
	return "OK"
}

func (p *parityTrio) ask(t *testing.T, transport int, e *grpcEnv, s pstep) string {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: s.domain, HitsAddend: s.hits}
	type jdesc struct {
		Entries    []map[string]string `json:"entries"`
		HitsAddend *uint64             `json:"hits_addend,omitempty"`
		Limit      map[string]any      `json:"limit,omitempty"`
	}
	var jds []jdesc
	for _, d := range s.descs {
		rd, jd := desc(d.kv...), jdesc{}
		for i := 0; i+1 < len(d.kv); i += 2 {
			jd.Entries = append(jd.Entries, map[string]string{"key": d.kv[i], "value": d.kv[i+1]})
		}
		if d.hits != nil {
			rd.HitsAddend, jd.HitsAddend = wrapperspb.UInt64(*d.hits), d.hits
		}
		if o := d.override; o != nil {
			rd.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(o[0].(int)),
				Unit: typev3.RateLimitUnit(typev3.RateLimitUnit_value[o[1].(string)])}
			jd.Limit = map[string]any{"requests_per_unit": o[0], "unit": o[1]}
		}
		req.Descriptors = append(req.Descriptors, rd)
		jds = append(jds, jd)
	}
	var a answer
	switch transport {
	case 0:
		a = grpcAnswer(t, e, req)
	case 1:
		body, _ := json.Marshal(map[string]any{"domain": s.domain, "hits_addend": s.hits, "descriptors": jds})
		a = httpAnswer(t, e, string(body))
	case 2:
		a = jsonRouteAnswer(t, e, req)
	}
	if a.Error != "" {
		t.Fatalf("%s refused %v: %s", transports[transport], s.descs, a.Error)
	}
	out := a.Overall + ":"
	for _, st := range a.Statuses {
		lim := "-"
		if st.Limit != "" { // name/requests/UNIT×multiplier
			parts := strings.Split(st.Limit, "/")
			lim = parts[1] + "/" + strings.TrimSuffix(parts[2], "×1")
		}
		out += " | " + pwant{st.Code, lim, st.Remaining, st.Reset}.String()
	}
	return out
}

// jsonRouteAnswer asks POST /json in protojson, as envoy's /json is asked.
func jsonRouteAnswer(t *testing.T, e *grpcEnv, req *rlsv3.RateLimitRequest) answer {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r := e.do("POST", "/json", string(body))
	if r.code == http.StatusBadRequest {
		return answer{Error: fmt.Sprint(r.body["field"]) + ": " + fmt.Sprint(r.body["detail"])}
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(r.raw), &resp); err != nil || (r.code != 200 && r.code != 429) {
		t.Fatalf("/json %s: %d %s", body, r.code, r.raw)
	}
	if (r.code == 429) != (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) {
		t.Fatalf("/json answered %d for %s", r.code, resp.OverallCode)
	}
	a := answer{Overall: resp.OverallCode.String()}
	for _, st := range resp.Statuses {
		s := answerStatus{Code: st.Code.String(), Remaining: uint64(st.LimitRemaining)}
		if cl := st.CurrentLimit; cl != nil {
			s.Limit = fmt.Sprintf("%s/%d/%s×%d", cl.Name, cl.RequestsPerUnit, cl.Unit, max(cl.UnitMultiplier.GetValue(), 1))
		}
		if st.DurationUntilReset != nil {
			s.Reset = st.DurationUntilReset.AsDuration()
		}
		a.Statuses = append(a.Statuses, s)
	}
	return a
}

func ok(limit string, remaining uint64, reset time.Duration) pwant {
	return pwant{"OK", limit, remaining, reset}
}
func over(limit string, reset time.Duration) pwant { return pwant{"OVER_LIMIT", limit, 0, reset} }

var noLimit = pwant{"OK", "-", 0, 0}

// The frozen clock starts at 12:30:20.4: a second window ends in 0.6 s, a minute in 39.6 s,
// an hour in 29 min 39.6 s, a day in 11 h 29 min 39.6 s — answered rounded up to whole
// seconds, as envoy (the unit minus the whole seconds elapsed).
const (
	toSecond = time.Second
	toMinute = 40 * time.Second
	toHour   = 29*time.Minute + 40*time.Second
	toDay    = 11*time.Hour + 29*time.Minute + 40*time.Second
)

func parityRules(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("testdata/envoyparity/sequences.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEnvoyParityDecisions: the integration tests' sequences and the limiter's answers.
func TestEnvoyParityDecisions(t *testing.T) {
	t.Parallel()
	rulesPath := parityRules(t)
	p := startTrio(t, func(int) string { return rulesPath })
	const rnd = "4242" // the integration test's random value: any fresh one

	// testBasicBaseConfig: an unknown domain; a first hit.
	p.run(t,
		pstep{domain: "nowhere", descs: []pdesc{pd("hello", "world")}, want: []pwant{noLimit}},
		pstep{domain: "edge", hits: 1, descs: []pdesc{pd("ip", "foo")}, want: []pwant{ok("50/SECOND", 49, toSecond)}},
	)
	// 25 hits on a 20-per-minute key: 19 … 0 left, then OVER_LIMIT with nothing left.
	for i := 0; i < 25; i++ {
		w := ok("20/MINUTE", uint64(19-i), toMinute)
		if i >= 20 {
			w = over("20/MINUTE", toMinute)
		}
		p.run(t, pstep{domain: "api", hits: 1, descs: []pdesc{pd("user", rnd)}, over: i >= 20, want: []pwant{w}})
	}
	// Two descriptors, each decided and counted on its own: the minute limit keeps
	// counting while the hour limit refuses (envoy's default, not
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	for i := 0; i < 15; i++ {
		w := ok("10/HOUR", uint64(9-i), toHour)
		if i >= 10 {
			w = over("10/HOUR", toHour)
		}
		p.run(t, pstep{domain: "api", hits: 1, descs: []pdesc{pd("user", rnd+"b"), pd("org", rnd+"b")}, over: i >= 10,
			want: []pwant{ok("20/MINUTE", uint64(19-i), toMinute), w}})
	}
	// testShareThreshold: values matching a shared wildcard share one counter; without
	// share_threshold every value has its own.
	for i := 0; i < 10; i++ {
		p.run(t, pstep{domain: "files", descs: []pdesc{pd("doc", "docs/a.pdf")}, want: []pwant{ok("10/HOUR", uint64(9-i), toHour)}})
	}
	p.run(t, pstep{domain: "files", descs: []pdesc{pd("doc", "docs/b.csv")}, over: true, want: []pwant{over("10/HOUR", toHour)}})
	for i := 0; i < 10; i++ {
		p.run(t, pstep{domain: "files", descs: []pdesc{pd("doc_apart", fmt.Sprintf("docs/%d", i))}, want: []pwant{ok("10/HOUR", 9, toHour)}})
	}

	// hits_addend as envoy counts it (an INCRBY whatever the answer): 20 per minute, 5 hits
	// leave 15; 16 more are over — counted all the same, nothing left — so the next single
	// hit is over too, and a check of 0 hits (a descriptor's own hits_addend 0) sees it.
	p.run(t,
		pstep{domain: "hits", hits: 5, descs: []pdesc{pd("acct", "a1")}, want: []pwant{ok("20/MINUTE", 15, toMinute)}},
		pstep{domain: "hits", hits: 16, descs: []pdesc{pd("acct", "a1")}, over: true, want: []pwant{over("20/MINUTE", toMinute)}},
		pstep{domain: "hits", hits: 1, descs: []pdesc{pd("acct", "a1")}, over: true, want: []pwant{over("20/MINUTE", toMinute)}},
		pstep{domain: "hits", descs: []pdesc{pd("acct", "a1").withHits(0)}, over: true, want: []pwant{over("20/MINUTE", toMinute)}},
		pstep{domain: "hits", descs: []pdesc{pd("acct", "a2").withHits(0)}, want: []pwant{ok("20/MINUTE", 20, toMinute)}},
		// A descriptor's own hits_addend wins over the request's.
		pstep{domain: "hits", hits: 7, descs: []pdesc{pd("acct", "a2").withHits(2), pd("acct", "a3")},
			want: []pwant{ok("20/MINUTE", 18, toMinute), ok("20/MINUTE", 13, toMinute)}},
		// requests_per_unit 0: every hit over; a check of 0 hits is not (0 is not above 0).
		pstep{domain: "hits", descs: []pdesc{pd("blocked", "b")}, over: true, want: []pwant{over("0/SECOND", toSecond)}},
		pstep{domain: "hits", descs: []pdesc{pd("blocked", "b").withHits(0)}, want: []pwant{ok("0/SECOND", 0, toSecond)}},
	)
	// Deliberately different: a rule with all_or_nothing (and every queue rule, and the
	// algorithms envoy does not have) counts nothing of a refused request and answers what
	// is left untouched.
	p.run(t,
		pstep{domain: "hits", hits: 5, descs: []pdesc{pd("acct_strict", "s1")}, want: []pwant{ok("20/MINUTE", 15, toMinute)}},
		pstep{domain: "hits", hits: 16, descs: []pdesc{pd("acct_strict", "s1")}, over: true, want: []pwant{{"OVER_LIMIT", "20/MINUTE", 15, toMinute}}},
		pstep{domain: "hits", hits: 1, descs: []pdesc{pd("acct_strict", "s1")}, want: []pwant{ok("20/MINUTE", 14, toMinute)}},
		pstep{domain: "hits", hits: 20, descs: []pdesc{pd("acct_tokens", "t1")}, want: []pwant{ok("20/MINUTE", 0, 3*time.Second)}},
		pstep{domain: "hits", hits: 2, descs: []pdesc{pd("acct_tokens", "t1")}, over: true, want: []pwant{{"OVER_LIMIT", "20/MINUTE", 0, 3 * time.Second}}},
	)
	// shadow_mode: over, yet OK (nothing left); quota_mode: over descriptors stay
	// OVER_LIMIT, the answer is OVER_LIMIT only when every quota descriptor is over (or a
	// descriptor not in quota mode is); unlimited: OK with 4294967295 left and no limit.
	p.run(t,
		pstep{domain: "modes", descs: []pdesc{pd("shadowed", "x")}, want: []pwant{ok("1/MINUTE", 0, toMinute)}},
		pstep{domain: "modes", descs: []pdesc{pd("shadowed", "x")}, want: []pwant{ok("1/MINUTE", 0, toMinute)}},
		pstep{domain: "modes", descs: []pdesc{pd("storage", "q"), pd("compute", "q")},
			want: []pwant{ok("2/DAY", 1, toDay), ok("1/DAY", 0, toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("storage", "q"), pd("compute", "q")},
			want: []pwant{ok("2/DAY", 0, toDay), over("1/DAY", toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("storage", "q"), pd("compute", "q")}, over: true,
			want: []pwant{over("2/DAY", toDay), over("1/DAY", toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("calls", "c"), pd("storage", "q2")},
			want: []pwant{ok("1/DAY", 0, toDay), ok("2/DAY", 1, toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("calls", "c"), pd("storage", "q2")}, over: true,
			want: []pwant{over("1/DAY", toDay), ok("2/DAY", 0, toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("health", "h")}, want: []pwant{{"OK", "-", math.MaxUint32, 0}}},
		// A descriptor's own limit (RateLimitOverride): a fixed window of its own.
		pstep{domain: "modes", descs: []pdesc{{kv: []string{"whatever", "w"}, override: &[2]any{2, "MINUTE"}}},
			want: []pwant{ok("2/MINUTE", 1, toMinute)}},
		pstep{domain: "modes", hits: 2, descs: []pdesc{{kv: []string{"whatever", "w"}, override: &[2]any{2, "MINUTE"}}}, over: true,
			want: []pwant{over("2/MINUTE", toMinute)}},
		// TestConfigLimitOverride: another override of the same unit on the same entries
		// counts on (3 counted, 1 more: 1 of 5 left); other entries count apart.
		pstep{domain: "modes", descs: []pdesc{{kv: []string{"whatever", "w"}, override: &[2]any{5, "MINUTE"}}},
			want: []pwant{ok("5/MINUTE", 1, toMinute)}},
		pstep{domain: "modes", descs: []pdesc{{kv: []string{"whatever", "w2"}, override: &[2]any{5, "MINUTE"}}},
			want: []pwant{ok("5/MINUTE", 4, toMinute)}},
	)
	// The reset counts down (the integration test's "durTest", 2 s apart), and a new
	// window starts afresh after the over-limit hits counted in the last one.
	p.run(t, pstep{domain: "api", descs: []pdesc{pd("daily", "durTest")}, want: []pwant{ok("20/DAY", 19, toDay)}})
	p.add(2 * time.Second)
	p.run(t, pstep{domain: "api", descs: []pdesc{pd("daily", "durTest")}, want: []pwant{ok("20/DAY", 18, toDay-2*time.Second)}})
	p.add(toMinute - 2*time.Second) // 12:31:00.4
	p.run(t, pstep{domain: "hits", descs: []pdesc{pd("acct", "a1")}, want: []pwant{ok("20/MINUTE", 19, time.Minute)}})

	t.Logf("envoy parity, decisions: %d steps, each answered alike over %d transports (%d answers)", p.steps, len(transports), p.steps*len(transports))
}

// TestEnvoyParityReload: envoy's integration reload test — a domain added to the rules
// directory answers once the file is loaded, and answers no limit once it is removed.
func TestEnvoyParityReload(t *testing.T) {
	t.Parallel()
	seq, err := os.ReadFile(parityRules(t))
	if err != nil {
		t.Fatal(err)
	}
	reload, err := os.ReadFile(filepath.Join(filepath.Dir(parityRules(t)), "reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs [3]string
	for i := range dirs {
		dirs[i] = t.TempDir()
		if err := os.WriteFile(filepath.Join(dirs[i], "sequences.yaml"), seq, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startTrio(t, func(i int) string { return dirs[i] }, "-rules-poll", "20ms")
	p.run(t, pstep{domain: "later", descs: []pdesc{pd("block", "foo")}, want: []pwant{noLimit}})
	// waitFor polls with checks of 0 hits, which count nothing.
	waitFor := func(limit string) {
		t.Helper()
		for i, e := range p.envs {
			got := "-"
			if !waittest.Within(10*time.Second, func() bool {
				r := e.call(t, "later", 0, pd("ip", "probe").descriptor())
				got = "-"
				if cl := r.Statuses[0].CurrentLimit; cl != nil {
					got = fmt.Sprintf("%d/%s", cl.RequestsPerUnit, cl.Unit)
				}
				return got == limit
			}) {
				t.Fatalf("%s: the rules of domain later were not (un)loaded: %s", transports[i], got)
			}
		}
	}
	for i := range dirs {
		if err := os.WriteFile(filepath.Join(dirs[i], "reload.yaml"), reload, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("50/SECOND")
	p.run(t,
		pstep{domain: "later", hits: 1, descs: []pdesc{pd("ip", "foo")}, want: []pwant{ok("50/SECOND", 49, toSecond)}},
		pstep{domain: "later", descs: []pdesc{pd("block", "foo")}, over: true, want: []pwant{over("0/SECOND", toSecond)}},
	)
	for i := range dirs {
		if err := os.Remove(filepath.Join(dirs[i], "reload.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("-")
	p.run(t, pstep{domain: "later", descs: []pdesc{pd("block", "foo")}, want: []pwant{noLimit}})
	t.Logf("envoy parity, reload: %d steps over %d transports", p.steps, len(transports))
}

func (d pdesc) descriptor() *commonv3.RateLimitDescriptor {
	r := desc(d.kv...)
	if d.hits != nil {
		r.HitsAddend = wrapperspb.UInt64(*d.hits)
	}
	return r
}

// TestEnvoyParityGlobalModes: envoy's SHADOW_MODE (overall OK, statuses unchanged, still
// counted) and QUOTA_MODE (every descriptor in quota mode).
func TestEnvoyParityGlobalModes(t *testing.T) {
	t.Parallel()
	rulesPath := parityRules(t)
	shadow := startTrio(t, func(int) string { return rulesPath }, "-shadow-mode")
	shadow.run(t,
		pstep{domain: "api", hits: 20, descs: []pdesc{pd("user", "s")}, want: []pwant{ok("20/MINUTE", 0, toMinute)}},
		pstep{domain: "api", descs: []pdesc{pd("user", "s"), pd("org", "s")}, want: []pwant{over("20/MINUTE", toMinute), ok("10/HOUR", 9, toHour)}},
		pstep{domain: "api", descs: []pdesc{pd("user", "s").withHits(0)}, want: []pwant{over("20/MINUTE", toMinute)}},
	)
	if r := shadow.envs[1].do("POST", "/v1/check", `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"s"}]}]}`); r.code != 200 ||
		r.header.Get("Retry-After") != "" || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("/v1/check under -shadow-mode answered %d %v %s (want 200, no Retry-After)", r.code, r.header, r.raw)
	}
	quota := startTrio(t, func(int) string { return rulesPath }, "-quota-mode")
	quota.run(t,
		pstep{domain: "modes", descs: []pdesc{pd("calls", "c"), pd("compute", "c")}, want: []pwant{ok("1/DAY", 0, toDay), ok("1/DAY", 0, toDay)}},
		pstep{domain: "modes", descs: []pdesc{pd("calls", "c"), pd("whatever", "c")}, want: []pwant{over("1/DAY", toDay), noLimit}},
		pstep{domain: "modes", descs: []pdesc{pd("calls", "c"), pd("compute", "c")}, over: true, want: []pwant{over("1/DAY", toDay), over("1/DAY", toDay)}},
	)
}

// TestEnvoyParityDynamicMetadata: with -response-dynamic-metadata, answers carry envoy's
// dynamic_metadata: the request, and the rules' metadata of the descriptors that passed.
func TestEnvoyParityDynamicMetadata(t *testing.T) {
	t.Parallel()
	rulesPath := parityRules(t)
	clock := newFrozen()
	e := startParityEnv(t, rulesPath, clock.clock(), "-response-dynamic-metadata")
	req := &rlsv3.RateLimitRequest{Domain: "modes", HitsAddend: 1, Descriptors: []*commonv3.RateLimitDescriptor{
		desc("tenant", "t1"), pd("project", "p1").withHits(1).descriptor(),
		{Entries: desc("own", "o").Entries, Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}},
	}}
	want := map[string]any{
		"domain": "modes", "hitsAddend": 1.0,
		"descriptors": []any{
			map[string]any{"entries": []any{"tenant=t1"}},
			map[string]any{"entries": []any{"project=p1"}, "hitsAddend": 1.0},
			map[string]any{"entries": []any{"own=o"}, "limit": "requests_per_unit:3 unit:HOUR"},
		},
		// both passed: the first's values win, objects merge
		"metadata": map[string]any{"owner": "team_1", "billing": map[string]any{"plan": "gold", "cost_center": 7.0}},
	}
	check := func(what string, got map[string]any, want map[string]any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: dynamic metadata\n got  %s\n want %s", what, g, w)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	check("gRPC", resp.DynamicMetadata.AsMap(), want)

	// The project (1 per minute) is over now: its metadata is left out.
	body, _ := protojson.Marshal(req)
	r := e.do("POST", "/json", string(body))
	var jr struct {
		DynamicMetadata map[string]any `json:"dynamicMetadata"`
	}
	if err := json.Unmarshal([]byte(r.raw), &jr); err != nil || r.code != 429 {
		t.Fatalf("/json: %d %s", r.code, r.raw)
	}
	want["metadata"] = map[string]any{"owner": "team_1", "billing": map[string]any{"plan": "gold"}}
	check("/json", jr.DynamicMetadata, want)

	hr := e.do("POST", "/v1/check", `{"domain":"modes","descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`)
	var cr struct {
		DynamicMetadata map[string]any `json:"dynamic_metadata"`
	}
	if err := json.Unmarshal([]byte(hr.raw), &cr); err != nil || hr.code != 200 {
		t.Fatalf("/v1/check: %d %s", hr.code, hr.raw)
	}
	check("/v1/check", cr.DynamicMetadata, map[string]any{"domain": "modes", "descriptors": []any{map[string]any{"entries": []any{"tenant=t1"}}},
		"metadata": map[string]any{"owner": "team_1", "billing": map[string]any{"plan": "gold"}}})

	// Off by default: no dynamic metadata.
	plain := startParityEnv(t, rulesPath, newFrozen().clock())
	if resp, err := plain.rls.ShouldRateLimit(ctx, req); err != nil || resp.DynamicMetadata != nil {
		t.Fatalf("without the flag: %v %v", resp.GetDynamicMetadata(), err)
	}
}

// TestEnvoyParityLocalCache: with -local-cache-bytes, a key found over its fixed window is
// answered OVER_LIMIT without Redis until the window ends (envoy's local cache). The
// proof: Redis is flushed after the refusal, and the refusal stays — until the window
// ends, when the store decides again. Without the cache the flush frees the key at once.
func TestEnvoyParityLocalCache(t *testing.T) {
	t.Parallel()
	rulesPath := parityRules(t)
	for _, cached := range []bool{true, false} {
		clock := newFrozen()
		var args []string
		if cached {
			args = []string{"-local-cache-bytes", "4096"}
		}
		e := startParityEnv(t, rulesPath, clock.clock(), args...)
		for i := 0; i < 21; i++ {
			e.call(t, "api", 1, desc("user", "cached"))
		}
		rc := redis.NewClient(mustRedisOptions(t, e.main.Config.RedisURL))
		if err := rc.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		r := e.call(t, "api", 1, desc("user", "cached"))
		if got, want := codesOf(r), map[bool]string{true: over1, false: ok1}[cached]; got != want {
			t.Fatalf("cache %v: after the flush %s, want %s", cached, got, want)
		}
		if cached {
			if st := r.Statuses[0]; st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != toMinute || st.CurrentLimit.GetRequestsPerUnit() != 20 {
				t.Fatalf("cached answer %v", st)
			}
			clock.Add(toMinute) // the next window: the store decides again
			if r := e.call(t, "api", 1, desc("user", "cached")); codesOf(r) != ok1 || r.Statuses[0].LimitRemaining != 19 {
				t.Fatalf("next window: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
			}
		}
	}
}

func mustRedisOptions(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestEnvoyParityProtojsonNames: POST /v1/check takes envoy's protojson field names too
// (numbers or strings of digits), and refuses a field given in both spellings.
func TestEnvoyParityProtojsonNames(t *testing.T) {
	t.Parallel()
	e := startParityEnv(t, parityRules(t), newFrozen().clock())
	r := e.do("POST", "/v1/check", `{"domain":"hits","hitsAddend":3,"descriptors":[
		{"entries":[{"key":"acct","value":"pj"}]},
		{"entries":[{"key":"acct","value":"pj2"}],"hitsAddend":"4"},
		{"entries":[{"key":"x","value":"y"}],"limit":{"requestsPerUnit":"5","unit":"MINUTE","unitMultiplier":2}}]}`)
	want := `{"overall_code":"OK","statuses":[` +
		`{"code":"OK","current_limit":{"requests_per_unit":20,"unit":"MINUTE"},"limit_remaining":17,"duration_until_reset":"40s"},` +
		`{"code":"OK","current_limit":{"requests_per_unit":20,"unit":"MINUTE"},"limit_remaining":16,"duration_until_reset":"40s"},` +
		`{"code":"OK","current_limit":{"requests_per_unit":5,"unit":"MINUTE","unit_multiplier":2},"limit_remaining":2,"duration_until_reset":"100s"}]}`
	if r.code != 200 || strings.TrimSpace(r.raw) != want {
		t.Fatalf("%d %s\nwant %s", r.code, r.raw, want)
	}
	for body, field := range map[string]string{
		`{"domain":"hits","hits_addend":1,"hitsAddend":1,"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`:                      "hits_addend",
		`{"domain":"hits","descriptors":[{"entries":[{"key":"a","value":"b"}],"hits_addend":1,"hitsAddend":"1"}]}`:                    "descriptors[0].hits_addend",
		`{"domain":"hits","descriptors":[{"entries":[{"key":"a","value":"b"}],"hitsAddend":"x"}]}`:                                    "descriptors[0].hitsAddend",
		`{"domain":"hits","descriptors":[{"entries":[{"key":"a","value":"b"}],"isNegativeHits":true}]}`:                               "descriptors[0].is_negative_hits",
		`{"domain":"hits","descriptors":[{"entries":[{"key":"a","value":"b"}],"limit":{"requests_per_unit":1,"requestsPerUnit":1}}]}`: "descriptors[0].limit.requests_per_unit",
		`{"domain":"hits","hitsAddend":4294967296,"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`:                             "hitsAddend",
		`{"domain":"hits","descriptors":[{"entries":[{"key":"a","value":"b"}],"hitsAddend":"4294967296"}]}`:                           "descriptors[0].hitsAddend",
	} {
		r := e.do("POST", "/v1/check", body)
		if r.code != 400 || r.body["field"] != field {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, r.code, r.raw, field)
		}
	}
	// A check of 0 hits on a fresh key: nothing counted, the window still ends in 40 s, in
	// the body and in X-RateLimit-Reset alike (envoy's headers count to the window's end).
	r = e.do("POST", "/v1/check", `{"domain":"hits","descriptors":[{"entries":[{"key":"acct","value":"fresh"}],"hits_addend":0}]}`)
	if r.code != 200 || !strings.Contains(r.raw, `"limit_remaining":20,"duration_until_reset":"40s"`) ||
		r.header.Get("X-RateLimit-Reset") != "40" || r.header.Get("X-RateLimit-Remaining") != "20" {
		t.Errorf("peek: %d %v %s", r.code, r.header, r.raw)
	}
	// POST /json: not protojson is a 400.
	if r := e.do("POST", "/json", `{"domain":"hits","descriptors":[{"entries":[{"key":"a"}]}],"bogus":1}`); r.code != 400 {
		t.Errorf("/json with an unknown field: %d %s", r.code, r.raw)
	}
}

func dialGRPC(t *testing.T, e *env) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.main.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestEnvoyParityDetailedMetric: detailed_metric counts a rule's checks per descriptor
// value — the first -detailed-metric-values values, then "_other" — so a value per user
// cannot grow the series without bound; sluice_checks_total stays per rule.
func TestEnvoyParityDetailedMetric(t *testing.T) {
	t.Parallel()
	e := startParityEnv(t, parityRules(t), newFrozen().clock(), "-detailed-metric-values", "3")
	for i := 0; i < 10; i++ {
		e.call(t, "modes", 1, desc("api_key", fmt.Sprintf("k%d", i)))
	}
	for i := 0; i < 3; i++ { // k0 over its 2 per minute on the third
		e.call(t, "modes", 1, desc("api_key", "k0"))
	}
	e.call(t, "modes", 1, desc("tenant", "t")) // no detailed_metric: no detailed series
	m := e.do("GET", "/metrics", "")
	var series []string
	for _, line := range strings.Split(m.raw, "\n") {
		if strings.HasPrefix(line, "sluice_checks_detailed_total{") {
			series = append(series, line)
		}
	}
	want := []string{
		`sluice_checks_detailed_total{code="OK",rule="modes_api_key",value="_other"} 7`,
		`sluice_checks_detailed_total{code="OK",rule="modes_api_key",value="api_key_k0"} 2`,
		`sluice_checks_detailed_total{code="OK",rule="modes_api_key",value="api_key_k1"} 1`,
		`sluice_checks_detailed_total{code="OK",rule="modes_api_key",value="api_key_k2"} 1`,
		`sluice_checks_detailed_total{code="OVER_LIMIT",rule="modes_api_key",value="api_key_k0"} 2`,
	}
	if strings.Join(series, "\n") != strings.Join(want, "\n") {
		t.Fatalf("series:\n%s\nwant:\n%s", strings.Join(series, "\n"), strings.Join(want, "\n"))
	}
}

// TestEnvoyParityMergeDomains: with -merge-domain-config, two files of one domain are
// served as one (envoy's MERGE_DOMAIN_CONFIG; the refusal without it is a rules test).
func TestEnvoyParityMergeDomains(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: split\ndescriptors:\n  - {key: region, value: eu, rate_limit: {unit: minute, requests_per_unit: 10}}\n",
		"b.yaml": "domain: split\ndescriptors:\n  - {key: region, value: us, rate_limit: {unit: minute, requests_per_unit: 20}}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := startParityEnv(t, dir, newFrozen().clock(), "-merge-domain-config=true")
	r := e.call(t, "split", 1, desc("region", "eu"), desc("region", "us"))
	if a, b := r.Statuses[0].CurrentLimit.GetRequestsPerUnit(), r.Statuses[1].CurrentLimit.GetRequestsPerUnit(); a != 10 || b != 20 {
		t.Fatalf("merged domain: limits %d and %d, want 10 and 20", a, b)
	}
}

// GET /v1/admin/rules shows the envoy fields a rule was given.
func TestEnvoyParityAdminRules(t *testing.T) {
	t.Parallel()
	e := startParityEnv(t, parityRules(t), newFrozen().clock())
	r := e.admin("GET", "/v1/admin/rules", "")
	byName := map[string]map[string]any{}
	for _, x := range r.body["rules"].([]any) {
		m := x.(map[string]any)
		byName[m["name"].(string)] = m
	}
	got := func(name, field string) string { return fmt.Sprint(byName[name][field]) }
	for _, c := range [][3]string{
		{"modes_storage", "quota_mode", "true"},
		{"modes_calls", "quota_mode", "<nil>"},
		{"hits_acct_strict", "all_or_nothing", "true"},
		{"hits_acct", "all_or_nothing", "<nil>"},
		{"modes_api_key", "detailed_metric", "true"},
		{"modes_tenant", "metadata", "map[billing:map[plan:gold] owner:team_1]"},
	} {
		if g := got(c[0], c[1]); g != c[2] {
			t.Errorf("%s %s: %s, want %s", c[0], c[1], g, c[2])
		}
	}
}
