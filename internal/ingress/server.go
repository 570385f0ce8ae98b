package ingress

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/console"
	"github.com/sluice-io/sluice/internal/decide"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/internal/submit"
	"github.com/sluice-io/sluice/queue"
)

// Server serves the ingress HTTP API. Create it with NewServer; it is safe for concurrent use.
type Server struct {
	cfg     ServerConfig
	metrics *metrics
	mux     *http.ServeMux
	bodies  httpx.Bodies
	submits *submit.Service // POST /v1/messages, GET and DELETE /v1/messages/{id} (internal/submit)
	checks  *decide.Service // POST /v1/check, POST /json and the gRPC RLS (internal/decide)
	audits  *auditCalls     // refused and failed admin calls, cancels (auditcalls.go)
	// submit is the route of POST /v1/messages, as the mux has it: ServeHTTP takes it
	// without the mux's pattern matching, the one route nearly every request takes.
	submit http.Handler
}

// FlushRefusals writes the submission service's refusal counts to Redis every interval
// until ctx ends (submit.Service.FlushRefusals).
func (s *Server) FlushRefusals(ctx context.Context, sched *queue.Scheduler, every time.Duration) {
	s.submits.FlushRefusals(ctx, sched, every)
}

// Defaults of the submission service (internal/submit), for the flag table.
const (
	DefaultMaxBatch = submit.DefaultMaxBatch
	DefaultMaxDelay = submit.DefaultMaxDelay
)

// ServerConfig holds what the server needs. Rules, Admitter and Status are required.
type ServerConfig struct {
	Rules    func() *rules.Set // the rules in force (hot-reloaded)
	Admitter *admit.Admitter
	Status   *status.Locator
	Limits   bucket.Store // for /v1/check; nil answers every check OK
	// GRPCResponseHeaders makes every gRPC check answer carry the rate-limit headers, as
	// envoy's LIMIT_RESPONSE_HEADERS_ENABLED; otherwise only rules with response_headers.
	GRPCResponseHeaders bool
	Envoy               decide.EnvoyConfig // envoy parity options; zero = envoy's defaults
	// Ready reports whether NATS and Redis are reachable (GET /readyz); nil = always ready.
	Ready func(ctx context.Context) error
	// Admin serves /v1/admin/; nil = 404. It is wrapped in bearer-token authentication.
	// AdminToken is a shorthand for Auth with this one token (scope operate) when Auth is nil.
	Admin      http.Handler
	AdminToken string
	MaxBody    int64 // default 1 MiB
	MaxBatch   int   // most messages in one batch submission; default DefaultMaxBatch
	// MaxDelay is how far ahead a deliver_at or delay may be; default DefaultMaxDelay.
	MaxDelay time.Duration
	Registry *prometheus.Registry
	Logger   *slog.Logger
	Now      func() time.Time
	// Unavailable is the Retry-After of a 503 while NATS cannot store. Default 2s.
	Unavailable time.Duration

	// Auth holds the admin tokens (scopes read and operate) and the submit tokens; nil or
	// without admin tokens, the admin API answers 401 to everyone. With submit tokens, the
	// check API needs a check token (checkauth.go).
	Auth *Auth
	// Audit keeps refused and failed admin calls and cancels (auditcalls.go); nil: they
	// are logged only.
	Audit *audit.Log
	// CheckClientNames are the client certificate identities (tlsx.NameAllowed) that may
	// use the check API without a token once submit tokens are on. -check-client-names.
	CheckClientNames []string
	// OverrideMaxFactor and OverrideMaxWindow bound a check's limit override where its
	// rule's limit_override does not say (-override-max-factor, default 10;
	// -override-max-window, default 24h).
	OverrideMaxFactor int64
	OverrideMaxWindow time.Duration
}

// NewServer builds the server and registers its metrics on cfg.Registry.
func NewServer(cfg ServerConfig) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OverrideMaxFactor <= 0 {
		cfg.OverrideMaxFactor = decide.DefaultOverrideMaxFactor
	}
	if cfg.OverrideMaxWindow <= 0 {
		cfg.OverrideMaxWindow = decide.DefaultOverrideMaxWindow
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Auth == nil && cfg.AdminToken != "" {
		cfg.Auth = &Auth{Static: []Token{NewStaticToken("admin-token", ScopeOperate, cfg.AdminToken)}}
	}
	s := &Server{cfg: cfg, metrics: newMetrics(cfg.Registry), mux: http.NewServeMux()}
	s.bodies.Max = cfg.MaxBody
	s.checks = decide.New(decide.Config{Rules: cfg.Rules, Limits: cfg.Limits, GRPCResponseHeaders: cfg.GRPCResponseHeaders,
		Envoy: cfg.Envoy, OverrideMaxFactor: cfg.OverrideMaxFactor, OverrideMaxWindow: cfg.OverrideMaxWindow,
		Callers: checkCallersOf(cfg), Bodies: &s.bodies, Registry: cfg.Registry, Logger: cfg.Logger, Now: cfg.Now})
	// MaxBatch, MaxDelay and Unavailable take their defaults in submit.New.
	s.submits = submit.New(submit.Config{Rules: cfg.Rules, Admitter: cfg.Admitter, Status: cfg.Status, Bodies: &s.bodies,
		MaxBatch: cfg.MaxBatch, MaxDelay: cfg.MaxDelay, Unavailable: cfg.Unavailable, CallerOf: submitCaller,
		Registry: cfg.Registry, Logger: cfg.Logger, Now: cfg.Now})
	s.audits = newAuditCalls(cfg.Audit, cfg.Registry)
	s.registerStoreFull(cfg.Registry)
	s.submit = s.route("POST /v1/messages", s.submitAuth(s.handleSubmit))
	s.route("GET /v1/messages/{id}", s.statusAuth(s.submits.HandleStatus))
	s.route("DELETE /v1/messages/{id}", s.auditCancel(s.submitAuth(s.submits.HandleCancel)))
	s.route("POST /v1/check", s.checks.HandleCheck)
	s.route("POST /json", s.checks.HandleEnvoyJSON) // envoyproxy/ratelimit's /json (protojson)
	s.route("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})
	s.route("GET /readyz", s.handleReady)
	s.route("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(openAPIDocument)
	})
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry}))
	// The operator console: static files, public (they hold no data); the page signs in
	// to the admin API with the admin token.
	// ServeMux redirects /ui to /ui/.
	s.mux.Handle("GET /ui/", s.instrument("/ui/", console.Handler()))
	if cfg.Admin != nil {
		s.mux.Handle("/v1/admin/", s.instrument("/v1/admin/", s.auditAdmin(s.authenticate(cfg.Admin))))
	} else {
		s.route("/v1/admin/", func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				s.unauthorized(w, r, "the admin API needs Authorization: Bearer <an admin token>")
				return
			}
			httpx.WriteProblem(w, httpx.NotFound("", "the admin API is not enabled in this process"))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteProblem(w, httpx.NotFound("", "no such endpoint: "+r.Method+" "+r.URL.Path))
	})
	return s
}

// SetDegraded records whether admission limits are decided locally (Redis unreachable).
func (s *Server) SetDegraded(on bool) {
	if on {
		s.metrics.degraded.Set(1)
	} else {
		s.metrics.degraded.Set(0)
	}
}

// RulesReloaded records a rules reload attempt for sluice_rules_reload_total.
func (s *Server) RulesReloaded(set *rules.Set, err error) {
	if err != nil {
		s.metrics.rulesReload.WithLabelValues("error").Inc()
		return
	}
	s.metrics.rulesReload.WithLabelValues("ok").Inc()
	s.metrics.rulesLoaded.Set(float64(len(set.Rules())))
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/messages" && r.URL.RawPath == "" {
		s.submit.ServeHTTP(w, r) // what the mux would pick (no host patterns, no path values)
		return
	}
	if r.Method != http.MethodConnect && !canonicalPath(r.URL.EscapedPath()) {
		// ServeMux would redirect (307, text/html) to the cleaned path: for an API path that
		// is another resource than the client named — ".." of a key's path is the queue's
		// keys, not the key "..". An answer, not a redirect.
		httpx.WriteProblem(w, httpx.BadRequest("", "the path "+strconv.Quote(r.URL.EscapedPath())+
			" has an empty, \".\" or \"..\" segment; sluice does not resolve them. A key is one percent-encoded segment: "+
			"\".\" is %2E, \"..\" is %2E%2E, \"/\" is %2F"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// canonicalPath reports whether p (escaped) is as ServeMux's cleaning leaves it: no empty,
// "." or ".." segment (a trailing slash is kept). Most paths have neither "//" nor "/.",
// and are not cleaned at all.
func canonicalPath(p string) bool {
	if !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
		return true
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// route registers h for pattern, instrumented, and returns what it registered.
func (s *Server) route(pattern string, h http.HandlerFunc) http.Handler {
	route := pattern
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	ih := s.instrument(route, h)
	s.mux.Handle(pattern, ih)
	return ih
}

// statusWriter records the status code for the duration histogram.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// instrument times h into sluice_http_request_duration_seconds{route,code}. The route's
// observer of each status code is looked up once (WithLabelValues hashes both labels and
// takes the vector's lock on every call) and kept.
func (s *Server) instrument(route string, h http.Handler) http.Handler {
	var observers [600]atomic.Pointer[prometheus.Observer] // by status code
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if code >= len(observers) { // not a status net/http sends
			s.metrics.httpDuration.WithLabelValues(route, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
			return
		}
		o := observers[code].Load()
		if o == nil {
			ob := s.metrics.httpDuration.WithLabelValues(route, strconv.Itoa(code))
			o = &ob
			observers[code].Store(o)
		}
		(*o).Observe(time.Since(start).Seconds())
	})
}

// Checks is the decision service the server routes /v1/check and /json to; its
// NewGRPCServer serves the envoy RLS over gRPC.
func (s *Server) Checks() *decide.Service { return s.checks }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			// Which backend, never its error text (addresses, user names, versions): that
			// goes to the log.
			s.cfg.Logger.Warn("ingress: not ready", "err", err)
			httpx.WriteProblem(w, httpx.NotReady(httpx.PublicReadyError(err)))
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	if s.storeFull() {
		// Still ready (see storeFull): the body says why submits get 503 #store-full.
		io.WriteString(w, "ready; the queue store is full (submits answer 503 #store-full)\n")
		return
	}
	io.WriteString(w, "ready\n")
}
