package ingress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/internal/loadtest"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// envoyRatelimitVersion is the envoyproxy/ratelimit the report measures against, taken
// from the Go module proxy (the module has no tags). Bump: the Version of
// `go list -m -json github.com/envoyproxy/ratelimit@latest`.
const envoyRatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// buildEnvoyRatelimit builds envoyproxy/ratelimit's service binary (src/service_cmd) at
// envoyRatelimitVersion into dir with `go install pkg@version`, which resolves the
// module's own go.mod and go.sum outside this module. It returns the binary's path.
func buildEnvoyRatelimit(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+envoyRatelimitVersion)
	cmd.Dir = dir // outside this module: nothing of sluice's go.mod applies
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install github.com/envoyproxy/ratelimit/src/service_cmd@%s: %v\n%s", envoyRatelimitVersion, err, tailLines(string(out), 15))
	}
	return filepath.Join(dir, "service_cmd"), nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// envoyBenchRules is the one rules file both servers load: envoy's format, which sluice
// reads unchanged (fixed windows counted as envoy's INCRBY, the only algorithm envoy has).
const envoyBenchRules = `domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000000
  - key: hot
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// TestEnvoyRatelimitReport measures sluice's envoy RLS gRPC service against
// envoyproxy/ratelimit itself (built from the Go module proxy at envoyRatelimitVersion):
// both as their own processes, on the same redis-server, with the same rules file and
// the same gRPC load loop (16 streams per HTTP/2 connection, as an Envoy worker
// multiplexes), in alternating rounds (the order swaps every round). Three workloads:
//
//   - cold: 10k keys, every call under its limit (local over-limit caches off, as by
//     default), at 16 and 64 concurrent calls;
//   - hot: 90 % of calls on 8 hot keys that are over their limit, 10 % on the 10k keys,
//     with both local over-limit caches on (sluice -local-cache-bytes, envoy
//     LOCAL_CACHE_SIZE_IN_BYTES, 4 MiB each), at 16 and 64;
//   - slow: the cold calls at 16, with both servers on Redis behind a TCP proxy that holds
//     every reply back 50 ms (startSlowProxy) and each call made with a 20 ms gRPC deadline,
//     as Envoy's rate limit filter makes it by default.
//
// It prints the median and min–max over the rounds of decisions/s, p50 and p99, the share
// of calls answered within the deadline (slow), the CPU per call of each server process
// (/proc/<pid>/stat) and of redis-server (INFO cpu), and the ratio against the goals of
// issue #22 (≥ 1.5× at 16 and 64, ≥ 2× on the hot keys). Skipped, saying why, when envoy
// cannot be built.
//
// SLUICE_BENCH_ROUND (3s) is a round's length, SLUICE_BENCH_ROUNDS (5) their number,
// SLUICE_BENCH_WORKLOADS (cold,hot,slow) the workloads run; SLUICE_BENCH_FLOOR=1 adds a third
// server to the cold and hot workloads, testdata/rlsfloor (grpc-go answering a fixed status:
// the floor of any Go RLS server on this machine); SLUICE_BENCH_PROFILE=file
// writes a CPU profile of sluice's ingress (it needs SLUICE_BENCH_DEBUG_ADDR) taken during
// the first measured round of SLUICE_BENCH_PROFILE_AT (workload/calls, default cold/16).
func TestEnvoyRatelimitReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	dur := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_ROUND")); err == nil {
		dur = d
	}
	rounds := 5
	if _, err := fmt.Sscan(os.Getenv("SLUICE_BENCH_ROUNDS"), &rounds); err != nil || rounds < 3 {
		rounds = 5
	}
	dir := t.TempDir()
	envoyBin, err := buildEnvoyRatelimit(dir)
	if err != nil {
		t.Skipf("envoyproxy/ratelimit could not be built, so there is nothing to compare with: %v", err)
	}
	// SLUICE_BENCH_FLOOR=1 measures a third server beside the two: rlsfloor (testdata), which
	// decides nothing and answers a fixed status on grpc-go with the ingress's transport
	// options — what any Go RLS server pays per call before deciding anything.
	floor := os.Getenv("SLUICE_BENCH_FLOOR") != ""
	if floor {
		if err := proctest.Build(dir, "./internal/ingress/testdata/rlsfloor"); err != nil {
			t.Fatal(err)
		}
	}
	if err := proctest.Build(dir, "./cmd/ingress"); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{TCP: true})
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()

	// envoy reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml; sluice reads that file.
	confDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(confDir, "bench.yaml")
	if err := os.WriteFile(rulesPath, []byte(envoyBenchRules), 0o644); err != nil {
		t.Fatal(err)
	}
	const cacheBytes = 4 << 20

	startSluice := func(t *testing.T, cache bool, redisURL string) (*proctest.Proc, string) {
		grpcAddr := freeAddr(t)
		args := []string{"-rules", rulesPath, "-http", "127.0.0.1:0", "-grpc", grpcAddr, "-nats", n.URL(), "-redis", redisURL, "-log-format", "json"}
		if cache {
			args = append(args, "-local-cache-bytes", fmt.Sprint(cacheBytes))
		}
		if a := os.Getenv("SLUICE_BENCH_DEBUG_ADDR"); a != "" {
			args = append(args, "-debug-addr", a)
		}
		p := proctest.Start(t, proctest.Spec{Name: "sluice-ingress", Bin: filepath.Join(dir, "ingress"), ReadyMsg: "ingress: listening", Args: args})
		return p, grpcAddr
	}
	startEnvoy := func(t *testing.T, cache bool, redisAddr string) (*proctest.Proc, string) {
		grpcAddr, httpAddr, debugAddr := freeAddr(t), freeAddr(t), freeAddr(t)
		port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
		env := []string{
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "USE_STATSD=false",
			"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"HOST=127.0.0.1", "PORT=" + port(httpAddr), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(debugAddr), "LOG_LEVEL=warn",
			// its README's recommended implicit pipelining for a single Redis
			"REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=0",
		}
		if cache {
			env = append(env, fmt.Sprintf("LOCAL_CACHE_SIZE_IN_BYTES=%d", cacheBytes))
		}
		p := proctest.Start(t, proctest.Spec{Name: "envoy-ratelimit", Bin: envoyBin, Env: env,
			Addr: grpcAddr, ReadyURL: "http://" + httpAddr + "/healthcheck"})
		return p, grpcAddr
	}

	const keys, hotKeys = 10000, 8
	coldReqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range coldReqs {
		coldReqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", fmt.Sprintf("c-%d", i))}}
	}
	hotReqs := make([]*rlsv3.RateLimitRequest, hotKeys)
	for i := range hotReqs {
		hotReqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{desc("hot", fmt.Sprintf("h-%d", i))}}
	}

	type workload struct {
		name  string
		what  string
		hot   bool // 90 % of calls on over-limit hot keys, local caches on
		slow  bool // Redis behind a proxy adding slowRedisDelay, calls with a deadline of slowDeadline
		concs []int
		goal  float64 // sluice ÷ envoy decisions/s; 0: none
	}
	workloads := []workload{
		{"cold", "10k keys, every call under its limit, local caches off", false, false, []int{16, 64}, 1.5},
		{"hot", fmt.Sprintf("90 %% of calls on %d over-limit hot keys, 10 %% on 10k keys, local over-limit caches on (%d MiB)", hotKeys, cacheBytes>>20), true, false, []int{16, 64}, 2},
		{"slow", fmt.Sprintf("10k keys, every call under its limit, Redis behind a proxy that adds %v to every reply, each call with a gRPC deadline of %v (Envoy's rate limit filter's default timeout)", slowRedisDelay, slowDeadline), false, true, []int{16}, 0},
	}
	if only := os.Getenv("SLUICE_BENCH_WORKLOADS"); only != "" {
		workloads = slices.DeleteFunc(workloads, func(w workload) bool { return !slices.Contains(strings.Split(only, ","), w.name) })
	}

	type server struct {
		name string
		proc *proctest.Proc
		addr string
	}
	type sample struct {
		rate      float64 // decisions/s: calls answered (within the deadline, when there is one) per second
		p50, p99  time.Duration
		inTime    float64       // share of calls answered within the deadline (1 without one)
		serverCPU time.Duration // per call
		redisCPU  time.Duration // per call
		loadCPU   time.Duration // per call, this process (the load generator)
	}
	// counts is what one round's calls came to.
	type counts struct {
		hotOK, answered, missed, failed atomic.Int64
		firstErr                        atomic.Value
	}

	coldMsgs, hotMsgs := make([][]byte, keys), make([][]byte, hotKeys)
	for i, r := range coldReqs {
		coldMsgs[i], _ = proto.Marshal(r)
	}
	for i, r := range hotReqs {
		hotMsgs[i], _ = proto.Marshal(r)
	}
	// one round of the gRPC load loop against addr: loadtest.RunGRPC (an event loop per
	// connection, a few µs of CPU per call), or with SLUICE_BENCH_CLIENT=grpc-go grpc-go's
	// client from a goroutine per call (tens of µs per call; the README's runs before 2026-11-25 14:30).
	load := func(addr string, conc int, wl workload, c *counts) (loadtest.Stats, error) {
		hotCall := func(k int) bool { return wl.hot && k%10 != 0 }
		// answer counts what a call came to; an error stops the round
		answer := func(k int, err error, code rlsv3.RateLimitResponse_Code) error {
			if wl.slow {
				switch {
				case err == nil:
					c.answered.Add(1)
				case status.Code(err) == codes.DeadlineExceeded:
					c.missed.Add(1)
				default: // counted and shown, not fatal: what a slow Redis makes a server answer is the point
					c.failed.Add(1)
					c.firstErr.CompareAndSwap(nil, err.Error())
				}
				return nil
			}
			if err != nil {
				return err
			}
			if hotCall(k) {
				if code == rlsv3.RateLimitResponse_OK {
					c.hotOK.Add(1)
				}
			} else if code != rlsv3.RateLimitResponse_OK {
				return fmt.Errorf("c-%d refused: %v", k%keys, code)
			}
			return nil
		}
		deadline := time.Duration(0)
		if wl.slow {
			deadline = slowDeadline
		}
		if os.Getenv("SLUICE_BENCH_CLIENT") != "grpc-go" {
			return loadtest.RunGRPC(loadtest.GRPCLoad{Addr: addr, Method: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
				Conc: conc, PerConn: 16, Deadline: deadline,
				Request: func(w, i int) []byte {
					if k := i*conc + w; hotCall(k) {
						return hotMsgs[k%hotKeys]
					} else {
						return coldMsgs[k%keys]
					}
				},
				Answer: func(w, i int, code int, msg string, resp []byte) error {
					var err error
					if code != loadtest.CodeOK {
						err = status.Error(codes.Code(code), msg)
					}
					oc, perr := overallCode(resp)
					if err == nil && perr != nil {
						err = perr
					}
					return answer(i*conc+w, err, oc)
				}}, time.Now().Add(dur))
		}
		conns := make([]rlsv3.RateLimitServiceClient, (conc+15)/16)
		for i := range conns {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<22))
			if err != nil {
				return loadtest.Stats{}, err
			}
			defer cc.Close()
			conns[i] = rlsv3.NewRateLimitServiceClient(cc)
		}
		bg := context.Background()
		return loadtest.Measure(conc, 0, time.Now().Add(dur), func(w, i int) error {
			k := i*conc + w
			req := coldReqs[k%keys]
			if hotCall(k) {
				req = hotReqs[k%hotKeys]
			}
			ctx := bg
			if deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(bg, deadline)
				defer cancel()
			}
			resp, err := conns[w/16].ShouldRateLimit(ctx, req)
			return answer(k, err, resp.GetOverallCode())
		})
	}

	var slowProxy *slowProxy
	for _, wl := range workloads {
		redisURL, redisAddr := r.URL(), r.Addr()
		if wl.slow {
			if slowProxy == nil {
				slowProxy = startSlowProxy(t, "tcp", r.Addr(), slowRedisDelay)
			}
			redisAddr = slowProxy.ln.Addr().String()
			redisURL = "redis://" + redisAddr
		}
		sl, slAddr := startSluice(t, wl.hot, redisURL)
		ev, evAddr := startEnvoy(t, wl.hot, redisAddr)
		servers := []server{{"sluice", sl, slAddr}, {"envoyproxy/ratelimit", ev, evAddr}}
		if floor && !wl.slow {
			fl := proctest.Start(t, proctest.Spec{Name: "rlsfloor", Bin: filepath.Join(dir, "rlsfloor"), ReadyMsg: "rlsfloor: listening", Args: []string{"-addr", "127.0.0.1:0"}})
			servers = append(servers, server{"grpc-go floor", fl, fl.Addr()})
		}
		for _, conc := range wl.concs {
			samples := make([][]sample, len(servers))
			cs := make([]counts, len(servers))
			for i, s := range servers { // warm-up: connections, pools, and the hot keys over their limit
				if _, err := load(s.addr, conc, wl, &cs[i]); err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				cs[i] = counts{}
			}
			for round := 0; round < rounds; round++ {
				for j := range servers {
					i := j
					if round%2 == 1 {
						i = len(servers) - 1 - j
					}
					s := servers[i]
					var prof chan error
					if path := os.Getenv("SLUICE_BENCH_PROFILE"); path != "" && i == 0 && wl.name == profileWorkload() && conc == profileConc() && round == 0 {
						prof = make(chan error, 1)
						go func() { prof <- fetchProfile(os.Getenv("SLUICE_BENCH_DEBUG_ADDR"), dur, path) }()
					}
					var rc counts
					a0, r0 := cpuTime(rdb, 0)
					p0 := loadtest.ProcCPU(s.proc.Pid())
					st, err := load(s.addr, conc, wl, &rc)
					a1, r1 := cpuTime(rdb, 0)
					p1 := loadtest.ProcCPU(s.proc.Pid())
					if err != nil {
						t.Fatalf("%s: %v", s.name, err)
					}
					if prof != nil {
						if err := <-prof; err != nil {
							t.Errorf("profile: %v", err)
						}
					}
					cs[i].hotOK.Add(rc.hotOK.Load())
					cs[i].answered.Add(rc.answered.Load())
					cs[i].missed.Add(rc.missed.Load())
					cs[i].failed.Add(rc.failed.Load())
					if e := rc.firstErr.Load(); e != nil {
						cs[i].firstErr.CompareAndSwap(nil, e)
					}
					calls := float64(max(st.Calls, 1))
					sm := sample{rate: st.Rate, p50: st.P50, p99: st.P99, inTime: 1,
						serverCPU: time.Duration(float64(p1-p0) / calls), redisCPU: time.Duration(float64(r1-r0) / calls),
						loadCPU: time.Duration(float64(a1-a0-(r1-r0)) / calls)}
					if wl.slow {
						sm.inTime = float64(rc.answered.Load()) / calls
						sm.rate = st.Rate * sm.inTime
					}
					samples[i] = append(samples[i], sm)
				}
			}
			t.Logf("sluice vs envoyproxy/ratelimit %s, %d concurrent calls, %s; same redis-server, same rules, same gRPC load loop; %d cores, %d alternating rounds of %v:",
				envoyRatelimitVersion, conc, wl.what, runtimeCPU(), rounds, dur)
			t.Logf("  %-22s %26s %10s %26s %9s %15s %14s %17s", "", "decisions/s median (min–max)", "p50", "p99 median (min–max)", "in time", "server CPU/call", "redis CPU/call", "load gen CPU/call")
			med := make([]sample, len(servers))
			for i, s := range servers {
				rates := field(samples[i], func(x sample) float64 { return x.rate })
				p99s := field(samples[i], func(x sample) float64 { return float64(x.p99) })
				med[i] = sample{medianF(rates), time.Duration(medianF(field(samples[i], func(x sample) float64 { return float64(x.p50) }))), time.Duration(medianF(p99s)),
					medianF(field(samples[i], func(x sample) float64 { return x.inTime })),
					time.Duration(medianF(field(samples[i], func(x sample) float64 { return float64(x.serverCPU) }))),
					time.Duration(medianF(field(samples[i], func(x sample) float64 { return float64(x.redisCPU) }))),
					time.Duration(medianF(field(samples[i], func(x sample) float64 { return float64(x.loadCPU) })))}
				inTime := "—"
				if wl.slow {
					inTime = fmt.Sprintf("%.1f %%", 100*med[i].inTime)
				}
				t.Logf("  %-22s %26s %10v %26s %9s %15v %14v %17v", s.name,
					fmt.Sprintf("%.0f (%.0f–%.0f)", med[i].rate, slices.Min(rates), slices.Max(rates)),
					med[i].p50.Round(10*time.Microsecond),
					fmt.Sprintf("%v (%v–%v)", med[i].p99.Round(10*time.Microsecond), time.Duration(slices.Min(p99s)).Round(10*time.Microsecond), time.Duration(slices.Max(p99s)).Round(10*time.Microsecond)),
					inTime, med[i].serverCPU.Round(100*time.Nanosecond), med[i].redisCPU.Round(100*time.Nanosecond), med[i].loadCPU.Round(100*time.Nanosecond))
			}
			if wl.slow {
				for i, s := range servers {
					c := &cs[i]
					e, _ := c.firstErr.Load().(string)
					t.Logf("  %s over the measured rounds: %d calls answered within %v, %d DeadlineExceeded, %d other errors %s",
						s.name, c.answered.Load(), slowDeadline, c.missed.Load(), c.failed.Load(), e)
				}
				continue
			}
			paired := make([]float64, rounds) // the ratio of each round's pair
			for k := range paired {
				paired[k] = samples[0][k].rate / samples[1][k].rate
			}
			ratio := med[0].rate / med[1].rate
			mark := "✔"
			if ratio < wl.goal {
				mark = "✘"
			}
			t.Logf("  sluice ÷ envoy: %.2f× decisions/s (rounds %.2f–%.2f×), %.2f× less server CPU per decision, %.2f× less server + redis CPU per decision; goal ≥ %.1f× %s",
				ratio, slices.Min(paired), slices.Max(paired),
				float64(med[1].serverCPU)/float64(med[0].serverCPU),
				float64(med[1].serverCPU+med[1].redisCPU)/float64(med[0].serverCPU+med[0].redisCPU), wl.goal, mark)
			if wl.hot {
				t.Logf("  hot calls answered OK in the measured rounds (an hour window turning): sluice %d, envoy %d", cs[0].hotOK.Load(), cs[1].hotOK.Load())
			}
			if len(servers) == 3 {
				t.Logf("  grpc-go floor ÷ envoy: %.2f× decisions/s; sluice answers %.0f %% of the floor's decisions/s and spends %v of server CPU per call above it (envoy %v)",
					med[2].rate/med[1].rate, 100*med[0].rate/med[2].rate,
					(med[0].serverCPU - med[2].serverCPU).Round(100*time.Nanosecond), (med[1].serverCPU - med[2].serverCPU).Round(100*time.Nanosecond))
			}
		}
		for _, s := range servers {
			s.proc.Kill()
		}
	}
	t.Logf("(decisions/s: calls answered per second — under the slow Redis, answered within the deadline; p50/p99: every call's latency, a call that missed its deadline counting until DeadlineExceeded; in time: the share of calls answered within the deadline. server CPU/call: the server process's user + system time from /proc/<pid>/stat per call; redis CPU/call: redis-server's INFO cpu per call; load gen CPU/call: this test process, the gRPC client. The load generator, both servers, NATS, redis-server (and the slow proxy, in this process) share the machine's cores.)")
}

// The slow-Redis workload: every Redis reply held back slowRedisDelay (startSlowProxy),
// every call made with a deadline of slowDeadline — Envoy's rate limit filter sends its
// `timeout` as the call's deadline, 20 ms unless set, and fails open or closed after it.
const (
	slowRedisDelay = 50 * time.Millisecond
	slowDeadline   = 20 * time.Millisecond
)

// profileWorkload and profileConc pick the round SLUICE_BENCH_PROFILE profiles:
// SLUICE_BENCH_PROFILE_AT=workload/conc (default cold/16).
func profileWorkload() string {
	w, _, _ := strings.Cut(os.Getenv("SLUICE_BENCH_PROFILE_AT"), "/")
	if w == "" {
		return "cold"
	}
	return w
}

func profileConc() int {
	_, c, _ := strings.Cut(os.Getenv("SLUICE_BENCH_PROFILE_AT"), "/")
	n := 16
	fmt.Sscan(c, &n)
	return n
}

// overallCode reads the overall_code of an encoded RateLimitResponse (field 1) without
// decoding the rest.
func overallCode(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	code := rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return code, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return code, protowire.ParseError(m)
			}
			code, b = rlsv3.RateLimitResponse_Code(v), b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return code, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return code, nil
}

func field[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fetchProfile writes a CPU profile of d from the pprof endpoint at debugAddr to path.
func fetchProfile(debugAddr string, d time.Duration, path string) error {
	if debugAddr == "" {
		return fmt.Errorf("SLUICE_BENCH_PROFILE needs SLUICE_BENCH_DEBUG_ADDR (the ingress's -debug-addr)")
	}
	secs := max(int(d/time.Second), 1)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
