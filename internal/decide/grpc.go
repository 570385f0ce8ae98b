package decide

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
)

// The envoy rate limit service (envoy.service.ratelimit.v3.RateLimitService) over gRPC:
// what Envoy and Istio proxies call. ShouldRateLimit goes through the same decide as
// POST /v1/check, so both answer alike for the same rules, store and descriptors.
//
// A rule that queues or parks (POST /v1/messages) answers like a check: its admission limit
// is counted and decides; its queue is not consulted and nothing is queued or parked. A
// queue rule without a rate_limit answers OK with no current_limit.

// rlsService implements rlsv3.RateLimitServiceServer on a Server.
type rlsService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Service
}

// ShouldRateLimit decides every descriptor of req. Bad input is InvalidArgument naming the
// field; an unknown domain or descriptor is OK with no limit (as envoyproxy/ratelimit); a
// limiter store that cannot decide is Unavailable (Envoy then applies its
// failure_mode_deny), DeadlineExceeded (or Canceled) when the call's own deadline passed
// meanwhile.
func (g *rlsService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	allowed, err := g.s.grpcCheckCaller(ctx)
	if err != nil {
		return nil, err
	}
	descs, p := rlsDescriptors(req)
	if p != nil {
		return nil, status.Error(codes.InvalidArgument, problemText(p))
	}
	if err := g.s.grpcDenied(checkDomain(allowed, req.GetDomain())); err != nil {
		return nil, err
	}
	v, err := g.s.decide(ctx, transportGRPC, req.GetDomain(), uint64(req.GetHitsAddend()), descs)
	var refused *overrideRefused
	switch {
	case errors.As(err, &refused):
		g.s.metrics.checkRefused.WithLabelValues("limit_override", transportGRPC).Inc()
		return nil, status.Error(codes.InvalidArgument, problemText(&refused.problem))
	case errors.Is(err, errLimitsInvalid):
		g.s.cfg.Logger.Error("ingress: a rule's limits were refused by the limiter", "err", err)
		return nil, status.Error(codes.Internal, "the rule's limits could not be evaluated")
	case err != nil && ctx.Err() != nil:
		// The caller's deadline passed (or it gave up) while the store was asked: say so,
		// not that the store is down — the caller may still read it, racing its own timer.
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		return nil, status.Error(codes.Unavailable, "the limiter store is unreachable")
	}
	return rlsResponse(v), nil
}

// problemText renders a validation problem as one line: "field: detail".
func problemText(p *httpx.Problem) string {
	if p.Field == "" {
		return p.Detail
	}
	return p.Field + ": " + p.Detail
}

// rlsDescriptors validates req with exactly the rules of POST /v1/check (same limits, same
// field names) and converts it. The envoy proto's own rules hold too: a descriptor entry's
// key must not be empty; its value may be (envoy uses a blank value as a wildcard in local
// rate limiting; here it is one more distinct value).
func rlsDescriptors(req *rlsv3.RateLimitRequest) ([]checkDescriptor, *httpx.Problem) {
	if p := request.ValidateDomain(req.GetDomain()); p != nil {
		return nil, p
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		p := httpx.BadRequest("descriptors", "is required: a list of {entries: [{key, value}]}")
		return nil, &p
	}
	if len(ds) > request.MaxCheckDescriptors {
		p := httpx.BadRequest("descriptors", "has more than "+strconv.Itoa(request.MaxCheckDescriptors)+" descriptors")
		return nil, &p
	}
	hits := int64(max(req.GetHitsAddend(), 1)) // envoy: 0 counts as 1
	out := make([]checkDescriptor, len(ds))
	es := make([]request.Entry, 0, 4)
	for i, d := range ds {
		at, atEntries := descriptorFields[i].at, descriptorFields[i].entries
		es = es[:0]
		for _, e := range d.GetEntries() {
			es = append(es, request.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if p := request.ValidateEntries(atEntries, es); p != nil {
			return nil, p
		}
		out[i] = checkDescriptor{Entries: ruleEntries(es), Hits: hits}
		if h := d.GetHitsAddend(); h != nil { // a descriptor's own hits_addend overrides the request's
			if h.GetValue() > request.MaxHitsAddend {
				p := httpx.BadRequest(at+".hits_addend", "must be 0 to "+strconv.FormatInt(request.MaxHitsAddend, 10))
				return nil, &p
			}
			out[i].Hits, out[i].OwnHits = int64(h.GetValue()), true // 0 checks without counting, as envoy
		}
		if d.GetIsNegativeHits() {
			p := httpx.BadRequest(at+".is_negative_hits", "is not supported: hits can only be counted, not given back")
			return nil, &p
		}
		if o := d.GetLimit(); o != nil {
			mult := uint64(1)
			if o.GetUnitMultiplier() != nil {
				mult = uint64(o.GetUnitMultiplier().GetValue())
				if mult == 0 {
					// Set but 0: envoy's proto rules refuse it (unit_multiplier > 0). Found
					// by FuzzRLSDescriptors (seed 892843dcbe0c3002).
					p := httpx.BadRequest(at+".limit.unit_multiplier", "must be 1 to 1048576")
					return nil, &p
				}
			}
			var p *httpx.Problem
			if out[i].Override, p = overrideLimit(at+".limit", uint64(o.GetRequestsPerUnit()), o.GetUnit().String(), mult); p != nil {
				return nil, p
			}
			out[i].LimitText = overrideText(uint64(o.GetRequestsPerUnit()), o.GetUnit().String(), mult)
		}
	}
	return out, nil
}

// descriptorFields names the fields of descriptor i in validation problems, built once
// rather than on every request.
var descriptorFields = func() (f [request.MaxCheckDescriptors]struct{ at, entries string }) {
	for i := range f {
		f[i].at = "descriptors[" + strconv.Itoa(i) + "]"
		f[i].entries = f[i].at + ".entries"
	}
	return f
}()

// oneStatus is the answer to a request of one descriptor (the usual case) in a single
// allocation: the response, its status and the status's limit and reset time.
type oneStatus struct {
	resp  rlsv3.RateLimitResponse
	ptr   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	ds    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// rlsResponse encodes a verdict as envoy's RateLimitResponse.
func rlsResponse(v checkVerdict) *rlsv3.RateLimitResponse {
	var resp *rlsv3.RateLimitResponse
	var one *oneStatus
	if len(v.Statuses) == 1 {
		one = &oneStatus{}
		resp = &one.resp
		resp.Statuses = one.ptr[:]
	} else {
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(v.Statuses))}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if v.Over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i, st := range v.Statuses {
		var ds *rlsv3.RateLimitResponse_DescriptorStatus
		if one != nil {
			ds = &one.ds
		} else {
			ds = &rlsv3.RateLimitResponse_DescriptorStatus{}
		}
		ds.Code, ds.LimitRemaining = rlsv3.RateLimitResponse_OK, clampUint32(st.Remaining)
		if st.Over {
			ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if st.Limit != nil {
			var cl *rlsv3.RateLimitResponse_RateLimit
			var reset *durationpb.Duration
			if one != nil {
				cl, reset = &one.limit, &one.reset
			} else {
				cl, reset = &rlsv3.RateLimitResponse_RateLimit{}, &durationpb.Duration{}
			}
			unit, mult := unitOf(st.Limit.Rate.Interval)
			cl.Name = st.Limit.Name
			cl.RequestsPerUnit = clampUint32(st.Limit.Rate.Requests)
			cl.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[unit])
			if mult != 1 {
				cl.UnitMultiplier = wrapperspb.UInt32(mult)
			}
			ds.CurrentLimit = cl
			// as durationpb.New
			reset.Seconds, reset.Nanos = int64(st.ResetAfter/time.Second), int32(st.ResetAfter%time.Second)
			ds.DurationUntilReset = reset
		}
		resp.Statuses[i] = ds
	}
	if v.DynamicMetadata != nil {
		if md, err := structpb.NewStruct(v.DynamicMetadata); err == nil { // rules metadata is JSON-compatible by construction
			resp.DynamicMetadata = md
		}
	}
	if v.HeaderRule && v.RateLimit != nil {
		h := make(http.Header, 8)
		httpx.SetRateLimitHeaders(h, *v.RateLimit)
		resp.ResponseHeadersToAdd = make([]*corev3.HeaderValue, 0, len(h))
		for _, name := range rlsHeaderNames {
			if vals := h[http.CanonicalHeaderKey(name)]; len(vals) > 0 {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: name, Value: vals[0]})
			}
		}
	}
	return resp
}

// rlsHeaderNames are the rate-limit headers a gRPC answer can carry, in a fixed order and
// spelled as POST /v1/check spells them (HTTP/2 lowercases them on the wire anyway).
var rlsHeaderNames = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Retry-After"}

func clampUint32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// GRPCConfig configures the gRPC listener of the ingress.
type GRPCConfig struct {
	// MaxRecvMsgSize is the largest request message in bytes. Default 1 MiB (as -max-body).
	MaxRecvMsgSize int
	// Keepalive: the server pings an idle connection after Time and closes it when no
	// answer comes within Timeout; clients may ping no more often than MinPing. Defaults
	// 30s, 10s, 10s (Envoy's gRPC clients ping only when told to).
	KeepaliveTime, KeepaliveTimeout, KeepaliveMinPing time.Duration
	// MaxConcurrentStreams per connection. Default 1024 (Envoy multiplexes every RLS call
	// of a worker over one HTTP/2 connection).
	MaxConcurrentStreams uint32
	// StreamWorkers is the number of goroutines kept to serve calls (grpc-go's
	// NumStreamWorkers); a call arriving while all are busy gets a goroutine of its own,
	// whose stack grows from scratch. Default 64 (see NewGRPCServer).
	StreamWorkers int
	Logger        *slog.Logger
	// TLS serves over TLS with this configuration (tlsx.Server.Config); nil = plain text.
	TLS *tls.Config
	// Reflection registers gRPC server reflection (-grpc-reflection; `sluice dev` on).
	// Default off: a production listener does not list its services to whoever asks.
	Reflection bool
}

func (c GRPCConfig) withDefaults() GRPCConfig {
	if c.MaxRecvMsgSize <= 0 {
		c.MaxRecvMsgSize = 1 << 20
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = 30 * time.Second
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = 10 * time.Second
	}
	if c.KeepaliveMinPing <= 0 {
		c.KeepaliveMinPing = 10 * time.Second
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 1024
	}
	if c.StreamWorkers <= 0 {
		c.StreamWorkers = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// GRPCServer is the ingress's gRPC server: the envoy RLS v3 service, grpc.health.v1 and,
// with GRPCConfig.Reflection, server reflection.
type GRPCServer struct {
	*grpc.Server
	Health *health.Server
}

// NewGRPCServer builds the gRPC server of s. Serve it with Serve(listener); stop it with
// Stop (graceful within a deadline).
func (s *Service) NewGRPCServer(c GRPCConfig) *GRPCServer {
	c = c.withDefaults()
	opts := append(GRPCTransportOptions(c), grpc.ChainUnaryInterceptor(s.grpcObserve(c.Logger)))
	if c.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.TLS)))
	}
	gs := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(gs, &rlsService{s: s})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	if c.Reflection {
		reflection.Register(gs)
	}
	return &GRPCServer{Server: gs, Health: hs}
}

// GRPCTransportOptions are the options of NewGRPCServer's grpc-go server for c, but for its
// credentials and interceptor: sizes, streams, keepalive, stream workers and flow control.
// The benchmark's floor server (internal/ingress/testdata/rlsfloor) runs with them too.
func GRPCTransportOptions(c GRPCConfig) []grpc.ServerOption {
	c = c.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxRecvMsgSize),
		// Metadata is bounded as HTTP headers are (grpc-go's default is 16 MiB): a longer
		// header list is refused before it reaches a handler.
		grpc.MaxHeaderListSize(httpx.MaxHeaderBytes),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinPing, PermitWithoutStream: true}),
		// A fixed pool of goroutines serves the streams: a new goroutine per call grows its
		// stack from scratch every time. grpc-go hands a stream to a worker only when one
		// is waiting, else starts a goroutine, so the pool must cover a burst of calls read
		// at once, not the cores — but workers take calls in turn, and each GC shrinks the
		// stacks of the idle ones, so every worker more is one more stack regrown per GC.
		// Stack growth, share of the ingress's CPU at 16 concurrent calls
		// (TestEnvoyRatelimitReport): 4 workers 11 % (hot keys), 256 workers 4–5 %, 32 or
		// 64 workers 2–2.5 %.
		grpc.NumStreamWorkers(uint32(c.StreamWorkers)),
		grpc.SharedWriteBuffer(true),
		// Fixed flow-control windows turn off the BDP estimator, whose pings cost a frame
		// and a write per burst of calls; RLS messages are a few hundred bytes.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 22),
	}
}

// Stop answers NOT_SERVING to health checks, then stops gracefully: no new calls, calls in
// flight finish. Whatever is still running at the deadline is cut off.
func (g *GRPCServer) Stop(timeout time.Duration) {
	g.Health.Shutdown()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		g.Server.Stop()
		<-done
	}
}

// grpcObserve records sluice_grpc_request_duration_seconds{method,code} and turns a panic
// into Internal (grpc-go would let it kill the process), logging it once with its stack.
func (s *Service) grpcObserve(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		defer func() {
			if r := recover(); r != nil {
				log.Error("ingress: gRPC handler panicked", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
			s.metrics.grpcDuration.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
		}()
		return handler(ctx, req)
	}
}
