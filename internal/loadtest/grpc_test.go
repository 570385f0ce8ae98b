package loadtest_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/internal/loadtest"
)

// healthServer serves grpc.health.v1 on a real gRPC server; a check of service "slow"
// is answered after 50 ms.
func healthServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*healthpb.HealthCheckRequest); ok && r.Service == "slow" {
			time.Sleep(50 * time.Millisecond) // the scenario: a slow service
		}
		return h(ctx, req)
	}))
	hs := health.NewServer()
	hs.SetServingStatus("slow", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func TestRunGRPC(t *testing.T) {
	addr := healthServer(t)
	quick, _ := proto.Marshal(&healthpb.HealthCheckRequest{})
	unknown, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "nope"})
	var ok, notFound, other atomic.Int64
	st, err := loadtest.RunGRPC(loadtest.GRPCLoad{Addr: addr, Method: "/grpc.health.v1.Health/Check", Conc: 40, PerConn: 16,
		Request: func(w, i int) []byte {
			if (w+i)%5 == 0 {
				return unknown
			}
			return quick
		},
		Answer: func(w, i int, code int, msg string, resp []byte) error {
			var r healthpb.HealthCheckResponse
			switch {
			case code == 0 && proto.Unmarshal(resp, &r) == nil && r.Status == healthpb.HealthCheckResponse_SERVING:
				ok.Add(1)
			case code == 5 && (w+i)%5 == 0: // NotFound
				notFound.Add(1)
			default:
				other.Add(1)
				t.Errorf("call %d of %d: code %d %q", i, w, code, msg)
			}
			return nil
		}}, time.Now().Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != int(ok.Load()+notFound.Load()+other.Load()) || ok.Load() < 100 || notFound.Load() < 20 || other.Load() != 0 {
		t.Fatalf("%+v: %d OK, %d not found, %d other", st, ok.Load(), notFound.Load(), other.Load())
	}
	t.Logf("%+v", st)
}

func TestRunGRPCDeadline(t *testing.T) {
	addr := healthServer(t)
	slow, _ := proto.Marshal(&healthpb.HealthCheckRequest{Service: "slow"})
	quick, _ := proto.Marshal(&healthpb.HealthCheckRequest{})
	var ok, missed, quickMissed atomic.Int64
	st, err := loadtest.RunGRPC(loadtest.GRPCLoad{Addr: addr, Method: "/grpc.health.v1.Health/Check", Conc: 8, Deadline: 20 * time.Millisecond,
		Request: func(w, i int) []byte {
			if w%2 == 0 {
				return slow
			}
			return quick
		},
		Answer: func(w, i int, code int, msg string, resp []byte) error {
			switch {
			case code == 0 && w%2 == 1:
				ok.Add(1)
			case code == loadtest.CodeDeadlineExceeded && w%2 == 0:
				missed.Add(1)
			case code == loadtest.CodeDeadlineExceeded:
				quickMissed.Add(1) // a stall of the shared machine
			default:
				t.Errorf("slot %d call %d: code %d %q", w, i, code, msg)
			}
			return nil
		}}, time.Now().Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if missed.Load() < 4*10 || ok.Load() < 100 || quickMissed.Load() > ok.Load()/50 {
		t.Fatalf("%+v: %d OK, %d missed", st, ok.Load(), missed.Load())
	}
	t.Logf("%+v: %d OK, %d missed, %d quick ones missed", st, ok.Load(), missed.Load(), quickMissed.Load())
}
