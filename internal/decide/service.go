package decide

import (
	"crypto/x509"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/rules"
)

// Config holds what the decision service needs. Rules is required.
type Config struct {
	Rules  func() *rules.Set // the rules in force (hot-reloaded)
	Limits bucket.Store      // nil answers every check OK
	// GRPCResponseHeaders makes every gRPC check answer carry the rate-limit headers, as
	// envoy's LIMIT_RESPONSE_HEADERS_ENABLED; otherwise only rules with response_headers.
	GRPCResponseHeaders bool
	Envoy               EnvoyConfig // envoy parity options (envoy.go); zero = envoy's defaults
	// OverrideMaxFactor and OverrideMaxWindow bound a check's limit override where its
	// rule's limit_override does not say (-override-max-factor, default 10;
	// -override-max-window, default 24h).
	OverrideMaxFactor int64
	OverrideMaxWindow time.Duration
	// Callers decides who may check (checkauth.go); nil = everyone (no -submit-tokens).
	Callers Callers
	// Bodies reads the HTTP transports' bodies (the ingress shares its own, -max-body);
	// nil = 1 MiB.
	Bodies   *httpx.Bodies
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Now      func() time.Time
}

// Callers decides who is calling the check API from a bearer secret (sent: one was given)
// and a verified client certificate (nil without): the ingress's check tokens and
// -check-client-names. domain is the one domain the caller may check ("" = any).
type Callers interface {
	CheckCaller(secret string, sent bool, cert *x509.Certificate) (domain string, denied *Denied)
}

// Denied is why a check caller was refused: unauthenticated (no or an unknown credential:
// 401, Unauthenticated) or forbidden (a credential of another scope or domain: 403,
// PermissionDenied).
type Denied struct {
	Unauthenticated bool
	Detail          string
}

// Service decides checks (decide.go) for its three transports: HTTP /v1/check (check.go),
// envoy's /json (envoy.go) and the envoy RLS over gRPC (grpc.go). Create it with New; it is
// safe for concurrent use.
type Service struct {
	cfg     Config
	metrics *metrics
	envoy   *envoyState
}

// New builds the service and registers its metrics on cfg.Registry.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OverrideMaxFactor <= 0 {
		cfg.OverrideMaxFactor = DefaultOverrideMaxFactor
	}
	if cfg.OverrideMaxWindow <= 0 {
		cfg.OverrideMaxWindow = DefaultOverrideMaxWindow
	}
	if cfg.Bodies == nil {
		cfg.Bodies = &httpx.Bodies{}
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Service{cfg: cfg, metrics: newMetrics(cfg.Registry)}
	s.envoy = newEnvoyState(cfg.Envoy, cfg.Registry)
	return s
}

// HandleCheck serves POST /v1/check.
func (s *Service) HandleCheck(w http.ResponseWriter, r *http.Request) { s.handleCheck(w, r) }

// HandleEnvoyJSON serves POST /json, envoyproxy/ratelimit's JSON endpoint (protojson).
func (s *Service) HandleEnvoyJSON(w http.ResponseWriter, r *http.Request) { s.handleEnvoyJSON(w, r) }

func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *[]byte, *httpx.Problem) {
	return s.cfg.Bodies.Read(w, r)
}

func (s *Service) releaseBody(bp *[]byte) { s.cfg.Bodies.Release(bp) }

func (s *Service) internalError(w http.ResponseWriter, rule string, err error) {
	s.cfg.Logger.Error("ingress: internal error", "rule", rule, "err", err)
	httpx.WriteProblem(w, httpx.Internal())
}

// metrics of the decision service (docs/metrics.md). Labels never carry a key.
type metrics struct {
	checks       *prometheus.CounterVec   // sluice_checks_total{rule,code,transport}
	checkRefused *prometheus.CounterVec   // sluice_checks_refused_total{reason,transport}
	grpcDuration *prometheus.HistogramVec // sluice_grpc_request_duration_seconds{method,code}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_total",
			Help: "Descriptors decided by POST /v1/check (transport http) and the envoy RLS gRPC ShouldRateLimit (transport grpc) by rule and code (OK, OVER_LIMIT, SHADOW_OVER_LIMIT).",
		}, []string{"rule", "code", "transport"}),
		checkRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_refused_total",
			Help: "Check requests refused before any descriptor was decided, by reason (unauthenticated, forbidden: -submit-tokens' check scope; limit_override: beyond its bounds) and transport.",
		}, []string{"reason", "transport"}),
		grpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_grpc_request_duration_seconds",
			Help:    "gRPC call durations by full method name and status code (OK, InvalidArgument, Unavailable, ...).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "code"}),
	}
	reg.MustRegister(m.checks, m.checkRefused, m.grpcDuration)
	return m
}

// ruleEntries are a decoded descriptor's entries as the rules match them.
func ruleEntries(es []request.Entry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.Key, Value: e.Value}
	}
	return out
}
