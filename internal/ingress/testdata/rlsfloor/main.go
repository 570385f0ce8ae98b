// Command rlsfloor is the floor TestEnvoyRatelimitReport measures sluice and
// envoyproxy/ratelimit against (SLUICE_BENCH_FLOOR=1): an envoy RLS v3 gRPC server that
// decides nothing. It serves ShouldRateLimit on grpc-go with the ingress's transport
// options (decide.GRPCTransportOptions: stream workers, shared write buffer, fixed
// flow-control windows) and answers every call with one fixed status shaped as sluice's
// answers are (a code, current_limit, limit_remaining, duration_until_reset) — OVER_LIMIT
// for a descriptor whose first entry's key is "hot", OK otherwise, as the benchmark's rules
// say. What it costs per call is what grpc-go, the proto codec and the machine cost any RLS
// server written in Go; whatever a server spends above it is its own.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-io/sluice/internal/decide"
)

type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func answer(code rlsv3.RateLimitResponse_Code, perUnit, remaining uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, reset int64) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: reset},
	}}}
}

var (
	over = answer(rlsv3.RateLimitResponse_OVER_LIMIT, 1, 0, rlsv3.RateLimitResponse_RateLimit_HOUR, 1800)
	ok   = answer(rlsv3.RateLimitResponse_OK, 1000000, 999999, rlsv3.RateLimitResponse_RateLimit_SECOND, 1)
)

func (floor) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if ds := req.GetDescriptors(); len(ds) > 0 && len(ds[0].GetEntries()) > 0 && ds[0].GetEntries()[0].GetKey() == "hot" {
		return over, nil
	}
	return ok, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "gRPC listen address")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Error("rlsfloor: listen", "err", err)
		os.Exit(1)
	}
	gs := grpc.NewServer(decide.GRPCTransportOptions(decide.GRPCConfig{})...)
	rlsv3.RegisterRateLimitServiceServer(gs, floor{})
	logger.Info("rlsfloor: listening", "addr", ln.Addr().String()) // what the benchmark waits for
	if err := gs.Serve(ln); err != nil {
		logger.Error("rlsfloor: serve", "err", err)
		os.Exit(1)
	}
}
