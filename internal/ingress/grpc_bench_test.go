package ingress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-io/sluice/internal/loadtest"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/proctest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// drive runs call from conc goroutines for d.
func drive(conc int, d time.Duration, call func(w, i int) error) (float64, time.Duration, error) {
	return loadtest.Run(conc, 0, time.Now().Add(d), call)
}

// TestCheckTransportReport measures decisions through the envoy RLS gRPC service against
// the same decisions through POST /v1/check, on one ingress with a real Redis, at 16 and
// 64 concurrent streams (gRPC: 16 streams per HTTP/2 connection, as an Envoy worker
// multiplexes; HTTP: one keep-alive connection per stream), and against go-redis/
// redis_rate's Allow called directly (the anchor: one GCRA script, no API in front).
// Same limit (GCRA, 1M/s), 10k keys, alternating rounds. CPU per decision counts this
// process (load generator, servers) and redis-server.
func TestCheckTransportReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench)")
	}
	const keys = 10000
	dur := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_ROUND")); err == nil {
		dur = d
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{TCP: true})
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte(`
domain: bench
descriptors:
  - key: client
    name: bench
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: leaky_bucket, burst: 1000000}
`), 0o644)
	// The ingress runs as its own process, so its CPU is told apart from the load
	// generator's (its process_cpu_seconds_total).
	if err := proctest.Build(dir, "./cmd/ingress"); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	args := []string{"-rules", rulesPath, "-http", "127.0.0.1:0", "-grpc", grpcAddr, "-nats", n.URL(), "-redis", r.URL(), "-log-format", "json"}
	if a := os.Getenv("SLUICE_BENCH_DEBUG_ADDR"); a != "" { // profile the ingress: go tool pprof http://$a/debug/pprof/profile
		args = append(args, "-debug-addr", a)
	}
	proc := proctest.Start(t, proctest.Spec{Name: "ingress", Bin: filepath.Join(dir, "ingress"), ReadyMsg: "ingress: listening", Args: args})
	ctx := context.Background()
	ingressCPU := func() time.Duration {
		m, err := proc.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(m.Get("process_cpu_seconds_total") * float64(time.Second))
	}
	httpAddr := proc.Addr()

	bodies := make([][]byte, keys)
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"c-%d"}]}]}`, i)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{desc("client", fmt.Sprintf("c-%d", i))}}
	}
	rdb := redis.NewClient(r.Options())
	defer rdb.Close()
	peerClient := redis.NewClient(func() *redis.Options { o := r.Options(); o.PoolSize = 128; return o }())
	defer peerClient.Close()
	peer := redis_rate.NewLimiter(peerClient)
	peerLimit := redis_rate.Limit{Rate: 1000000, Burst: 1000000, Period: time.Second}

	type mode struct {
		name string
		run  func(conc int) (float64, time.Duration, error)
	}
	modes := []mode{
		{"gRPC ShouldRateLimit", func(conc int) (float64, time.Duration, error) {
			conns := make([]rlsv3.RateLimitServiceClient, (conc+15)/16)
			for i := range conns {
				// Fixed windows, as Envoy's gRPC client keeps (no BDP pings).
				cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<22))
				if err != nil {
					return 0, 0, err
				}
				defer cc.Close()
				conns[i] = rlsv3.NewRateLimitServiceClient(cc)
			}
			return drive(conc, dur, func(w, i int) error {
				resp, err := conns[w/16].ShouldRateLimit(ctx, reqs[(i*conc+w)%keys])
				if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
					err = fmt.Errorf("refused: %v", resp)
				}
				return err
			})
		}},
		{"POST /v1/check", func(conc int) (float64, time.Duration, error) {
			tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			url := "http://" + httpAddr + "/v1/check"
			return drive(conc, dur, func(w, i int) error {
				resp, err := client.Post(url, "application/json", bytes.NewReader(bodies[(i*conc+w)%keys]))
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			})
		}},
		{"redis_rate Allow", func(conc int) (float64, time.Duration, error) {
			return drive(conc, dur, func(w, i int) error {
				res, err := peer.Allow(ctx, fmt.Sprintf("c-%d", (i*conc+w)%keys), peerLimit)
				if err == nil && res.Allowed == 0 {
					err = fmt.Errorf("denied")
				}
				return err
			})
		}},
	}
	if only := os.Getenv("SLUICE_BENCH_ONLY"); only != "" { // one mode, for a CPU profile
		modes = slices.DeleteFunc(modes, func(md mode) bool { return !strings.Contains(md.name, only) })
	}
	const rounds = 3
	for _, conc := range []int{16, 64} {
		rate := make([]float64, len(modes))
		all := make([]time.Duration, len(modes))    // CPU per decision: every process
		server := make([]time.Duration, len(modes)) // the ingress process and redis-server
		p99 := make([]time.Duration, len(modes))
		for _, md := range modes { // warm-up
			if _, _, err := md.run(conc); err != nil {
				t.Fatalf("%s: %v", md.name, err)
			}
		}
		for round := 0; round < rounds; round++ {
			for i, md := range modes {
				c0, r0 := cpuTime(rdb, 0)
				i0 := ingressCPU()
				rt, p, err := md.run(conc)
				c1, r1 := cpuTime(rdb, 0)
				i1 := ingressCPU()
				if err != nil {
					t.Fatalf("%s: %v", md.name, err)
				}
				decisions := rt * dur.Seconds()
				rate[i] += rt / rounds
				all[i] += time.Duration(float64(c1-c0+i1-i0) / decisions / rounds)
				server[i] += time.Duration(float64(r1-r0+i1-i0) / decisions / rounds)
				p99[i] = max(p99[i], p)
			}
		}
		ref, anchor := min(1, len(modes)-1), len(modes)-1 // POST /v1/check, redis_rate
		t.Logf("check decisions, %d concurrent streams, %d keys, GCRA limit, real Redis, %d cores, %d rounds of %v:", conc, keys, runtimeCPU(), rounds, dur)
		t.Logf("  %-22s %11s %9s %14s %12s %19s %19s %20s", "", "decisions/s", "p99", "server CPU/dec", "all CPU/dec",
			"÷ /v1/check (rate)", "÷ redis_rate (rate)", "÷ /v1/check per core")
		for i, md := range modes {
			t.Logf("  %-22s %11.0f %9v %14v %12v %18.2f× %18.2f× %19.2f×", md.name, rate[i], p99[i].Round(10*time.Microsecond),
				server[i].Round(100*time.Nanosecond), all[i].Round(100*time.Nanosecond),
				rate[i]/rate[ref], rate[i]/rate[anchor], float64(server[ref])/float64(server[i]))
		}
		t.Logf("  (server = the ingress process + redis-server; for redis_rate, redis-server alone. all = with the load generator.)")
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
