package ingress_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/internal/devstack"
	ingressproc "github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/request"
)

// Rules of the gRPC tests: one rule per algorithm and feature, a queue-only rule and a
// queue rule with an admission limit.
const grpcRules = `
domain: rls
descriptors:
  - key: login
    name: login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api
    name: api
    response_headers: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: shadow
    name: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tb
    name: tokens
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 5}
  - key: swc
    name: swc
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_counter}
  - key: swl
    name: swl
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: leaky
    name: leaky
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_bucket, burst: 3}
  - key: multi
    name: multi
    rate_limit:
      - {unit: second, requests_per_unit: 2, name: multi-second}
      - {unit: minute, requests_per_unit: 5, name: multi-minute}
  - key: thirty
    name: thirty
    rate_limit: {interval: 30s, requests_per_unit: 2}
---
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
---
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: user_id
        name: marketing
        rate_limit: {unit: minute, requests_per_unit: 2}
        overflow: park
        queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
        sink: {url: "http://127.0.0.1:1/unused"}
  - key: message_type
    value: promo
    descriptors:
      - key: user_id
        name: promo
        checks: share
        rate_limit: {unit: minute, requests_per_unit: 2}
        overflow: park
        queue: {capacity: 50, outflow: {unit: second, requests_per_unit: 1}}
        sink: {url: "http://127.0.0.1:1/unused"}
`

// frozen is a clock the test moves by hand (the Redis store decides with the time it is
// given, so answers that depend on time repeat exactly).
type frozen struct{ ns atomic.Int64 }

func newFrozen() *frozen {
	f := &frozen{}
	// Mid-second, mid-minute of tomorrow: no window edge near the start, and in the future,
	// because the store expires window counters at absolute times (a day in the past made
	// every counter expire at once: the test broke when the wall clock passed its date).
	day := time.Now().UTC().Add(24 * time.Hour).Truncate(24 * time.Hour)
	f.ns.Store(day.Add(12*time.Hour + 30*time.Minute + 20*time.Second + 400*time.Millisecond).UnixNano())
	return f
}
func (f *frozen) Now() time.Time          { return time.Unix(0, f.ns.Load()) }
func (f *frozen) Add(d time.Duration)     { f.ns.Add(int64(d)) }
func (f *frozen) clock() func() time.Time { return f.Now }

type grpcEnv struct {
	*env
	rls  rlsv3.RateLimitServiceClient
	conn *grpc.ClientConn
}

// startGRPC starts an ingress (real Redis, embedded NATS) with the gRPC rules and the
// envoy documentation examples of testdata/envoy, and a gRPC client of it.
func startGRPC(t *testing.T, clock func() time.Time, args ...string) *grpcEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(grpcRules), 0o644); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Abs("testdata/envoy")
	e := launch(t, path+","+examples, clock, nil, args...)
	conn, err := grpc.NewClient(e.main.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcEnv{env: e, rls: rlsv3.NewRateLimitServiceClient(conn), conn: conn}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (g *grpcEnv) call(t *testing.T, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := g.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// codes renders the overall code and every status code, e.g. "OVER_LIMIT: OK OVER_LIMIT".
func codesOf(r *rlsv3.RateLimitResponse) string {
	s := r.OverallCode.String() + ":"
	for _, st := range r.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

const (
	ok1   = "OK: OK"
	over1 = "OVER_LIMIT: OVER_LIMIT"
)

func TestGRPCShouldRateLimit(t *testing.T) {
	t.Parallel()
	clock := newFrozen()
	g := startGRPC(t, clock.clock())

	t.Run("limit, remaining, reset, then over", func(t *testing.T) {
		for i, want := range []struct {
			codes     string
			remaining uint32
		}{{ok1, 1}, {ok1, 0}, {over1, 0}, {over1, 0}} {
			r := g.call(t, "rls", 0, desc("login", "u1")) // hits_addend 0 counts 1
			st := r.Statuses[0]
			if codesOf(r) != want.codes || st.LimitRemaining != want.remaining {
				t.Fatalf("call %d: %s remaining %d, want %s remaining %d", i+1, codesOf(r), st.LimitRemaining, want.codes, want.remaining)
			}
			if cl := st.CurrentLimit; cl == nil || cl.RequestsPerUnit != 2 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.UnitMultiplier != nil {
				t.Fatalf("call %d: current_limit %v", i+1, cl)
			}
			// The frozen clock is 20.4 s into its minute: a fixed window resets in 39.6 s,
			// answered in whole seconds as envoy (60 − the 20 whole seconds elapsed).
			if d := st.DurationUntilReset.AsDuration(); d != 40*time.Second {
				t.Fatalf("call %d: duration_until_reset %v, want 40s", i+1, d)
			}
			if len(r.ResponseHeadersToAdd) != 0 {
				t.Fatalf("headers for a rule that did not ask for them: %v", r.ResponseHeadersToAdd)
			}
		}
	})

	t.Run("several descriptors: each decided, overall the worst", func(t *testing.T) {
		if got := codesOf(g.call(t, "rls", 2, desc("login", "u2"), desc("multi", "m1"))); got != "OK: OK OK" {
			t.Fatalf("first: %s", got)
		}
		if got := codesOf(g.call(t, "rls", 1, desc("login", "u2"), desc("multi", "m1"))); got != "OVER_LIMIT: OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("second: %s", got)
		}
		r := g.call(t, "rls", 1, desc("login", "u3"), desc("login", "u2"), desc("nothing", "x"))
		if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT OK" || r.Statuses[0].LimitRemaining != 1 || r.Statuses[2].CurrentLimit != nil {
			t.Fatalf("mixed: %s %v", codesOf(r), r.Statuses)
		}
		// The multi rule's limit that decided is named in current_limit.
		r = g.call(t, "rls", 1, desc("multi", "m2"))
		if cl := r.Statuses[0].CurrentLimit; cl.Name != "multi-second" || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("multi: %v remaining %d", cl, r.Statuses[0].LimitRemaining)
		}
	})

	t.Run("hits_addend of the request and of a descriptor", func(t *testing.T) {
		r := g.call(t, "rls", 2, desc("api", "h1"))
		if codesOf(r) != ok1 || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("hits 2 of 3: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
		}
		d := desc("api", "h2")
		d.HitsAddend = wrapperspb.UInt64(3) // overrides the request's 1
		r = g.call(t, "rls", 1, d, desc("api", "h3"))
		if codesOf(r) != "OK: OK OK" || r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 2 {
			t.Fatalf("descriptor hits: %s %v", codesOf(r), r.Statuses)
		}
		// More hits than the limit can ever hold: refused, never a crash.
		if got := codesOf(g.call(t, "rls", math.MaxUint32, desc("api", "h4"))); got != over1 {
			t.Fatalf("MaxUint32 hits: %s", got)
		}
	})

	t.Run("unknown domain or descriptor: OK without a limit", func(t *testing.T) {
		for _, domain := range []string{"no-such-domain", "rls"} {
			r := g.call(t, domain, 1, desc("unknown", "x"), desc("login", "u9", "extra", "level"))
			if codesOf(r) != "OK: OK OK" {
				t.Fatalf("%s: %s", domain, codesOf(r))
			}
			for _, st := range r.Statuses {
				if st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
					t.Fatalf("%s: status with a limit: %v", domain, st)
				}
			}
		}
	})

	t.Run("every algorithm", func(t *testing.T) {
		for _, c := range []struct {
			key   string
			oks   int
			unit  rlsv3.RateLimitResponse_RateLimit_Unit
			multi uint32
		}{
			{"tb", 5, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
			{"swc", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
			{"swl", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
			{"leaky", 3, rlsv3.RateLimitResponse_RateLimit_SECOND, 0},
			{"thirty", 2, rlsv3.RateLimitResponse_RateLimit_SECOND, 30},
		} {
			for i := 0; i <= c.oks; i++ {
				r := g.call(t, "rls", 1, desc(c.key, "a1"))
				want := ok1
				if i == c.oks {
					want = over1
				}
				if codesOf(r) != want {
					t.Fatalf("%s call %d: %s, want %s", c.key, i+1, codesOf(r), want)
				}
				cl := r.Statuses[0].CurrentLimit
				if cl.Unit != c.unit || (c.multi == 0) != (cl.UnitMultiplier == nil) || (c.multi != 0 && cl.UnitMultiplier.Value != c.multi) {
					t.Fatalf("%s: current_limit %v", c.key, cl)
				}
			}
		}
	})

	t.Run("shadow mode answers OK and counts the refusal", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if got := codesOf(g.call(t, "rls", 1, desc("shadow", "s1"))); got != ok1 {
				t.Fatalf("shadow call %d: %s", i+1, got)
			}
		}
		metrics := g.do("GET", "/metrics", "").raw
		if !strings.Contains(metrics, `sluice_checks_total{code="SHADOW_OVER_LIMIT",rule="shadowed",transport="grpc"} 2`) {
			t.Fatalf("no shadow refusals counted:\n%s", grep(metrics, "sluice_checks_total"))
		}
	})

	t.Run("response headers when the rule asks", func(t *testing.T) {
		r := g.call(t, "rls", 1, desc("api", "hd"))
		want := map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "40",
			"RateLimit-Policy": `"api";q=3;w=60`, "RateLimit": `"api";r=2;t=40`}
		if got := headerMap(r); !equalMaps(got, want) {
			t.Fatalf("headers %v, want %v", got, want)
		}
		g.call(t, "rls", 2, desc("api", "hd"))
		r = g.call(t, "rls", 1, desc("api", "hd"))
		if h := headerMap(r); h["Retry-After"] != "40" || h["X-RateLimit-Retry-After"] != "40" || h["X-RateLimit-Remaining"] != "0" {
			t.Fatalf("over-limit headers %v", h)
		}
	})

	t.Run("queue rules answer as checks and enqueue nothing", func(t *testing.T) {
		// Queue only: no admission limit, OK without one.
		for i := 0; i < 5; i++ {
			r := g.call(t, "orders", 1, desc("merchant_id", "m-1"))
			if codesOf(r) != ok1 || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("queue-only rule: %s %v", codesOf(r), r.Statuses[0])
			}
		}
		// Queue with an admission limit: the check is decided by the admission limit, on
		// counters of its own (checks: own, the default)...
		for i, want := range []string{ok1, ok1, over1} {
			if got := codesOf(g.call(t, "messaging", 1, desc("message_type", "marketing", "user_id", "u-7"))); got != want {
				t.Fatalf("marketing check %d: %s, want %s", i+1, got, want)
			}
		}
		// ...so this user's next message is still admitted.
		rep := g.do("POST", "/v1/messages", submit("messaging", [][2]string{{"message_type", "marketing"}, {"user_id", "u-7"}}, `{"n":1}`))
		if rep.code != 202 || rep.body["state"] != "queued" {
			t.Fatalf("submit after the checks: %d %s", rep.code, rep.raw)
		}
		// checks: share counts on the admission counters: the next message is parked for
		// the window.
		for i, want := range []string{ok1, ok1, over1} {
			if got := codesOf(g.call(t, "messaging", 1, desc("message_type", "promo", "user_id", "u-7"))); got != want {
				t.Fatalf("promo check %d: %s, want %s", i+1, got, want)
			}
		}
		rep = g.do("POST", "/v1/messages", submit("messaging", [][2]string{{"message_type", "promo"}, {"user_id", "u-7"}}, `{"n":1}`))
		if rep.code != 202 || rep.body["state"] != "parked" {
			t.Fatalf("promo submit after the checks: %d %s", rep.code, rep.raw)
		}
		// Nothing was queued by a check: only the one marketing submission waits.
		for q, depth := range map[string]float64{"orders": 0, "marketing": 1, "promo": 0} {
			rep := g.do("GET", "/v1/admin/queues/"+q, "", "Authorization", "Bearer s3cret-0123456789")
			if rep.code != 200 || rep.body["depth"] != depth {
				t.Fatalf("queue %s after gRPC checks: %d %s, want depth %v", q, rep.code, rep.raw, depth)
			}
		}
	})

	t.Run("a descriptor's limit override", func(t *testing.T) {
		d := desc("tenant", "t1")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		for i, want := range []string{ok1, over1} {
			r := g.call(t, "no-rules-here", 1, d)
			if codesOf(r) != want || r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Fatalf("override call %d: %s %v", i+1, codesOf(r), r.Statuses[0])
			}
		}
		// The same entries under another domain are another counter.
		if got := codesOf(g.call(t, "other-domain", 1, d)); got != ok1 {
			t.Fatalf("override in another domain: %s", got)
		}
	})

	t.Run("metrics per method and code", func(t *testing.T) {
		g.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{})
		metrics := g.do("GET", "/metrics", "").raw
		for _, want := range []string{
			`sluice_grpc_request_duration_seconds_count{code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}`,
			`sluice_grpc_request_duration_seconds_count{code="InvalidArgument",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`,
			`sluice_checks_total{code="OVER_LIMIT",rule="login",transport="grpc"}`,
		} {
			if !strings.Contains(metrics, want) {
				t.Fatalf("metrics lack %s:\n%s", want, grep(metrics, "sluice_grpc|sluice_checks"))
			}
		}
	})
}

// TestGRPCResponseHeadersFlag: -grpc-response-headers adds the headers for every rule.
func TestGRPCResponseHeadersFlag(t *testing.T) {
	t.Parallel()
	g := startGRPC(t, newFrozen().clock(), "-grpc-response-headers")
	r := g.call(t, "rls", 1, desc("login", "f1"))
	if h := headerMap(r); h["X-RateLimit-Limit"] != "2" || h["RateLimit-Policy"] != `"login";q=2;w=60` {
		t.Fatalf("headers %v", h)
	}
	// No limit decided: nothing to say.
	if r := g.call(t, "rls", 1, desc("unknown", "x")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers without a limit: %v", r.ResponseHeadersToAdd)
	}
}

func TestGRPCBadInput(t *testing.T) {
	t.Parallel()
	g := startGRPC(t, nil)
	long := strings.Repeat("k", request.MaxKeyBytes+1)
	overHits := desc("login", "b1")
	overHits.HitsAddend = wrapperspb.UInt64(1 << 40)
	negative := desc("login", "b2")
	negative.IsNegativeHits = true
	noUnit := desc("login", "b3")
	noUnit.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	zeroRate := desc("login", "b4")
	zeroRate.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_SECOND}
	many := make([]*commonv3.RateLimitDescriptor, request.MaxCheckDescriptors+1)
	for i := range many {
		many[i] = desc("login", "b5")
	}
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("login", "x")}}, codes.InvalidArgument, "domain: is required"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "rls"}, codes.InvalidArgument, "descriptors: is required"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: many}, codes.InvalidArgument, "descriptors: has more than 64"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{{}}}, codes.InvalidArgument, "descriptors[0].entries: is required"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{desc("login", "x"), desc("", "x")}}, codes.InvalidArgument, "descriptors[1].entries[0].key: is required"},
		{"long key", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{desc(long, "x")}}, codes.InvalidArgument, "descriptors[0].entries[0].key: must be valid UTF-8 of at most 256 bytes"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{desc("login", long)}}, codes.InvalidArgument, "descriptors[0].entries[0].value: must be valid UTF-8"},
		{"long domain", &rlsv3.RateLimitRequest{Domain: long, Descriptors: []*commonv3.RateLimitDescriptor{desc("login", "x")}}, codes.InvalidArgument, "domain: must be valid UTF-8"},
		{"hits_addend overflow", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{overHits}}, codes.InvalidArgument, "descriptors[0].hits_addend: must be 0 to 4294967295"},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{negative}}, codes.InvalidArgument, "descriptors[0].is_negative_hits: is not supported"},
		{"override without unit", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{noUnit}}, codes.InvalidArgument, "descriptors[0].limit.unit: must be one of"},
		{"override of 0 requests", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{zeroRate}}, codes.InvalidArgument, "descriptors[0].limit.requests_per_unit: must be 1 to"},
		{"oversized request", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 2<<20), Descriptors: []*commonv3.RateLimitDescriptor{desc("login", "x")}}, codes.ResourceExhausted, "larger than max"},
	} {
		_, err := g.rls.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.code, c.msg)
		}
	}
	// An empty value is a value like any other (envoy's proto allows it).
	if got := codesOf(g.call(t, "rls", 1, desc("login", ""))); got != ok1 {
		t.Fatalf("empty value: %s", got)
	}
	// Still serving after all that.
	if got := codesOf(g.call(t, "rls", 1, desc("login", "after"))); got != ok1 {
		t.Fatalf("after bad input: %s", got)
	}
}

func TestGRPCHealthReflectionAndStop(t *testing.T) {
	t.Parallel()
	g := startGRPC(t, nil, "-grpc-reflection")
	ctx := context.Background()
	hc := healthpb.NewHealthClient(g.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v", err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(g.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Fatalf("reflection lists %v, not %s", names, want)
		}
	}

	// A health watcher sees NOT_SERVING when the process stops; the stop is graceful and
	// within the shutdown timeout (2s) although a client still holds a connection.
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: ""})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}
	start := time.Now()
	g.main.Close()
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("Close took %v with a shutdown timeout of 2s", took)
	}
	if r, err := watch.Recv(); err == nil && r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after Close the watch says %v", r.Status)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := g.rls.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: []*commonv3.RateLimitDescriptor{desc("login", "x")}}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call after Close: %v", err)
	}
}

// TestEnvoyDocExamples loads the configurations of envoyproxy/ratelimit's README examples
// (testdata/envoy, one file each) and checks each documented behaviour over gRPC.
func TestEnvoyDocExamples(t *testing.T) {
	t.Parallel()
	g := startGRPC(t, newFrozen().clock())
	seq := func(t *testing.T, domain string, want []string, ds ...*commonv3.RateLimitDescriptor) []*rlsv3.RateLimitResponse {
		t.Helper()
		var out []*rlsv3.RateLimitResponse
		for i, w := range want {
			r := g.call(t, domain, 1, ds...)
			if got := codesOf(r); got != w {
				t.Fatalf("%s call %d: %s, want %s", domain, i+1, got, w)
			}
			out = append(out, r)
		}
		return out
	}
	t.Run("1 exact values", func(t *testing.T) {
		seq(t, "ex1_db", []string{ok1, ok1, ok1, over1}, desc("database", "users"))
		seq(t, "ex1_db", []string{ok1}, desc("database", "default"))
		seq(t, "ex1_db", []string{ok1}, desc("database", "other")) // not configured: no limit
	})
	t.Run("2 nested and aggregate", func(t *testing.T) {
		ds := []*commonv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2060000001"), desc("to_number", "2060000001")}
		rs := seq(t, "ex2_messaging", []string{"OK: OK OK", "OK: OK OK", "OVER_LIMIT: OVER_LIMIT OK", "OVER_LIMIT: OVER_LIMIT OK", "OVER_LIMIT: OVER_LIMIT OVER_LIMIT"}, ds...)
		if rs[3].Statuses[1].LimitRemaining != 0 || rs[2].Statuses[1].LimitRemaining != 1 {
			t.Fatalf("the per-number limit counts every request: %v", rs[2].Statuses[1])
		}
		seq(t, "ex2_messaging", []string{"OK: OK OK"}, desc("message_type", "marketing", "to_number", "2060000002"), desc("to_number", "2060000002"))
	})
	t.Run("3 most specific match, zero blocks", func(t *testing.T) {
		seq(t, "ex3_edge", []string{over1}, desc("remote_address", "50.0.0.5"))
		seq(t, "ex3_edge", []string{ok1, ok1, ok1, over1}, desc("remote_address", "50.0.0.1"))
	})
	t.Run("4 same depth only", func(t *testing.T) {
		r := seq(t, "ex4_flat", []string{ok1, ok1, ok1}, desc("key", "value", "subkey", "subvalue"))
		if r[0].Statuses[0].CurrentLimit != nil {
			t.Fatal("a two-entry descriptor matched a depth-1 limit")
		}
		seq(t, "ex4_flat", []string{ok1, ok1, over1}, desc("key", "value"))
		seq(t, "ex4_nested", []string{ok1, ok1, over1}, desc("key", "value", "subkey", "subvalue"))
	})
	t.Run("5 unlimited", func(t *testing.T) {
		for _, r := range seq(t, "ex5_internal", []string{ok1, ok1, ok1}, desc("ldap", "any")) {
			if st := r.Statuses[0]; st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
				t.Fatalf("unlimited status %v", st)
			}
		}
		seq(t, "ex5_internal", []string{ok1, ok1, over1}, desc("azure", "any"))
	})
	t.Run("6 shadow mode", func(t *testing.T) {
		seq(t, "ex6_shadow", []string{ok1, ok1, ok1}, desc("service", "auth", "user", "user-a"))
		seq(t, "ex6_shadow", []string{ok1, ok1, over1}, desc("service", "auth", "user", "user-b"))
	})
	t.Run("7 replaces", func(t *testing.T) {
		both := []*commonv3.RateLimitDescriptor{desc("key_1", "value_1", "user", "alice"), desc("key_2", "value_2", "user", "alice")}
		rs := seq(t, "ex7_replaces", []string{"OK: OK OK", "OK: OK OK", "OK: OK OK", "OVER_LIMIT: OK OVER_LIMIT"}, both...)
		if rs[0].Statuses[0].CurrentLimit != nil {
			t.Fatalf("the replaced limit decided: %v", rs[0].Statuses[0])
		}
		// The replaced limit was never counted: alone, it still has its one request.
		seq(t, "ex7_replaces", []string{ok1, over1}, desc("key_1", "value_1", "user", "alice"))
	})
	t.Run("8 detailed_metric", func(t *testing.T) {
		seq(t, "ex8_detailed", []string{ok1, ok1, over1}, desc("key1", "unspecified"))
		seq(t, "ex8_detailed", []string{ok1, ok1}, desc("key1", "unspecified2"))
		seq(t, "ex8_detailed", []string{ok1, ok1, ok1, ok1, over1}, desc("key1", "value1"))
	})
	t.Run("9 wildcard", func(t *testing.T) {
		seq(t, "ex9_wildcard", []string{ok1, ok1, over1}, desc("key1", "value1"))
		seq(t, "ex9_wildcard", []string{ok1, ok1, over1}, desc("key1", "value2"))
		if r := seq(t, "ex9_wildcard", []string{ok1}, desc("key1", "other")); r[0].Statuses[0].CurrentLimit != nil {
			t.Fatal("a value outside the wildcard matched")
		}
	})
	t.Run("unit_multiplier", func(t *testing.T) {
		r := seq(t, "ex_multiplier", []string{ok1, ok1, over1}, desc("key1", "a"))
		cl := r[0].Statuses[0].CurrentLimit
		if cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.UnitMultiplier.GetValue() != 5 {
			t.Fatalf("current_limit %v", cl)
		}
		// 12:30:20.4 in a five-minute window starting 12:30:00: 4m39.6s, in whole seconds.
		if d := r[0].Statuses[0].DurationUntilReset.AsDuration(); d != 4*time.Minute+40*time.Second {
			t.Fatalf("duration_until_reset %v", d)
		}
	})
}

func headerMap(r *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// grep keeps the lines of s that contain any of the |-separated words.
func grep(s, words string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range strings.Split(words, "|") {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestGRPCDev: `sluice dev` (the in-process memory store) serves the same gRPC service
// on the example rules, including the envoy file among them.
func TestGRPCDev(t *testing.T) {
	t.Parallel()
	examples, _ := filepath.Abs("../../deploy/examples")
	cfg, err := devstack.ParseFlags([]string{"-rules", examples, "-data", t.TempDir(),
		"-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats-addr", "127.0.0.1:0", "-sink-addr", "127.0.0.1:0",
		"-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := devstack.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.Close)
	var banner strings.Builder
	dev.PrintBanner(&banner)
	if !strings.Contains(banner.String(), "envoy RLS: localhost:") {
		t.Fatalf("the banner does not say where the gRPC service is:\n%s", banner.String())
	}
	m := dev.Ingress
	conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := &grpcEnv{rls: rlsv3.NewRateLimitServiceClient(conn), conn: conn}
	for i := 0; i < 5; i++ { // auth.yaml: 5 logins a minute
		if got := codesOf(g.call(t, "auth", 1, desc("auth_type", "login"))); got != ok1 {
			t.Fatalf("login %d: %s", i+1, got)
		}
	}
	if got := codesOf(g.call(t, "auth", 1, desc("auth_type", "login"))); got != over1 {
		t.Fatalf("sixth login: %s", got)
	}
	if err := listServices(conn); err != nil {
		t.Fatalf("server reflection on sluice dev: %v", err)
	}
	// envoy-compat.yaml: an internal address is unlimited, a banned client refused outright.
	r := g.call(t, "edge_proxy", 1, desc("remote_address", "10.0.0.1"), desc("client_id", "scraper-9", "banned", "true"))
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" || r.Statuses[0].LimitRemaining != math.MaxUint32 {
		t.Fatalf("edge_proxy: %s %v", codesOf(r), r.Statuses)
	}
}

// TestDebugAddr: -debug-addr serves pprof on its own listener, and only there.
func TestDebugAddr(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *ingressproc.Config) { c.DebugAddr = "127.0.0.1:0" })
	resp, err := http.Get("http://" + e.main.DebugAddr.String() + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pprof on -debug-addr: %d", resp.StatusCode)
	}
	if r := e.do("GET", "/debug/pprof/cmdline", ""); r.code != 404 {
		t.Fatalf("pprof on the API listener: %d", r.code)
	}
}
