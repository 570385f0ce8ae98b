package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/console"
	"github.com/sluice-io/sluice/internal/decide"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// Server serves the ingress HTTP API. Create it with NewServer; it is safe for concurrent use.
type Server struct {
	cfg     ServerConfig
	metrics *metrics
	mux     *http.ServeMux
	bodies  httpx.Bodies
	refused refusals
	checks  *decide.Service // POST /v1/check, POST /json and the gRPC RLS (internal/decide)
	audits  *auditCalls     // refused and failed admin calls, cancels (auditcalls.go)
}

// refusals counts this process's 429s per rule between two flushes to Redis (see
// FlushRefusals), where every ingress's counts add up for the admin API's refused/s.
type refusals struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (r *refusals) add(rule string) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[string]int64{}
	}
	r.counts[rule]++
	r.mu.Unlock()
}

func (r *refusals) take() map[string]int64 {
	r.mu.Lock()
	c := r.counts
	r.counts = nil
	r.mu.Unlock()
	return c
}

// FlushRefusals writes the refusals counted since the last flush to Redis every interval
// until ctx ends. Counts that cannot be written are dropped (they only feed a rate shown
// to operators) and the failure is logged once per minute at most.
func (s *Server) FlushRefusals(ctx context.Context, sched *queue.Scheduler, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c := s.refused.take(); len(c) > 0 {
			wctx, cancel := context.WithTimeout(ctx, every)
			err := sched.Rates.AddRefused(wctx, c, s.cfg.Now())
			cancel()
			if err != nil && time.Since(lastLog) > time.Minute {
				lastLog = time.Now()
				s.cfg.Logger.Warn("ingress: refusal counts not written (admin refused/s undercounts)", "err", err)
			}
		}
	}
}

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
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
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
	if cfg.Unavailable <= 0 {
		cfg.Unavailable = 2 * time.Second
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
	s.audits = newAuditCalls(cfg.Audit, cfg.Registry)
	s.registerStoreFull(cfg.Registry)
	s.route("POST /v1/messages", s.submitAuth(s.handleSubmit))
	s.route("GET /v1/messages/{id}", s.statusAuth(s.handleStatus))
	s.route("DELETE /v1/messages/{id}", s.auditCancel(s.submitAuth(s.handleCancel)))
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

func (s *Server) route(pattern string, h http.HandlerFunc) {
	route := pattern
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	s.mux.Handle(pattern, s.instrument(route, h))
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

var codeStrings = func() map[int]string {
	m := map[int]string{}
	for c := 100; c < 600; c++ {
		m[c] = strconv.Itoa(c)
	}
	return m
}()

func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.httpDuration.WithLabelValues(route, codeStrings[code]).Observe(time.Since(start).Seconds())
	})
}

// readBody reads the request body up to MaxBody; a larger body is a 413.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *[]byte, *httpx.Problem) {
	return s.bodies.Read(w, r)
}

func (s *Server) releaseBody(bp *[]byte) { s.bodies.Release(bp) }

// Checks is the decision service the server routes /v1/check and /json to; its
// NewGRPCServer serves the envoy RLS over gRPC.
func (s *Server) Checks() *decide.Service { return s.checks }

// submitResponse is the body of 202 and 200 answers to POST /v1/messages.
type submitResponse struct {
	ID       string `json:"id"`
	State    string `json:"state,omitempty"` // empty: a repeat whose original is no longer tracked
	Depth    *int64 `json:"depth,omitempty"`
	Capacity *int64 `json:"capacity,omitempty"`
	ETA      string `json:"eta,omitempty"`
	RetryAt  string `json:"retry_at,omitempty"`
}

func (s *Server) serveSubmit(w http.ResponseWriter, r *http.Request) {
	// The media type first: a body that is not declared JSON (a cross-site form, text/plain)
	// is not even read.
	media, prob := submitMediaType(r)
	if prob != nil {
		httpx.WriteProblem(w, *prob)
		return
	}
	body, bp, prob := s.readBody(w, r)
	defer s.releaseBody(bp)
	if prob != nil {
		s.metrics.admissions.WithLabelValues("", decisionError).Inc()
		httpx.WriteProblem(w, *prob)
		return
	}
	if isBatch(media, body) {
		s.handleBatch(w, r, body)
		return
	}
	var req submitRequest
	if p := decodeSubmit(r, body, &req); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if p := submitRefused(r.Context(), req.Domain, -1); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	} else if h := r.Header.Get("Idempotency-Key"); h != "" && h != req.IdempotencyKey {
		httpx.WriteProblem(w, httpx.BadRequest("idempotency_key", "differs from the Idempotency-Key header"))
		return
	}
	if p := req.validate(); p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	req.traceParent, req.traceState = telemetry.FromHTTP(r.Header)
	req.depth = prefersDepth(r.Header)
	s.write(w, s.submit(r.Context(), &req))
}

// writeQueued answers 202 for a queued message: the body submitResponse would give, written
// directly (the id is a UUID and the eta RFC 3339, so nothing needs escaping) — this is the
// answer to almost every admission, and encoding/json's reflection was most of its cost.
func writeQueued(w http.ResponseWriter, id string, depth, capacity int64, eta time.Time) {
	b := make([]byte, 0, 160)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id) // ids are printable ASCII: its fast path, not AppendQuote's rune decoding
	b = append(b, `,"state":"`+status.Queued+`"`...)
	if depth > 0 { // known: the claim engine's count, or asked for (Prefer: return=representation)
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, depth, 10)
	}
	b = append(b, `,"capacity":`...)
	b = strconv.AppendInt(b, capacity, 10)
	if !eta.IsZero() {
		b = append(b, `,"eta":"`...)
		b = eta.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusAccepted)
	w.Write(b)
}

func (s *Server) internalError(w http.ResponseWriter, rule string, err error) {
	s.cfg.Logger.Error("ingress: internal error", "rule", rule, "err", err)
	httpx.WriteProblem(w, httpx.Internal())
}

// statusResponse is GET /v1/messages/{id}.
type statusResponse struct {
	ID        string `json:"id"`
	Domain    string `json:"domain"`
	Rule      string `json:"rule"`
	Key       string `json:"key"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	LastError string `json:"last_error"`
	RetryAt   string `json:"retry_at,omitempty"`
	DeliverAt string `json:"deliver_at,omitempty"` // scheduled: when it enters its queue
	Position  *int   `json:"position,omitempty"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Status.Get(r.Context(), id)
	if err != nil {
		s.writeLocateError(w, id, err)
		return
	}
	if t, ok := authorizedFor(r, st.Domain); !ok {
		// An id statusAuth could not place (an earlier version's, found as a dead letter).
		forbidden(w, fmt.Sprintf("token %q reads messages of domain %q only", t.Name, t.Domain))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, newStatusResponse(st))
}

func newStatusResponse(st status.Status) statusResponse {
	resp := statusResponse{ID: st.ID, Domain: st.Domain, Rule: st.Rule, Key: st.Key, State: st.State, Attempts: st.Attempts,
		CreatedAt: st.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: st.UpdatedAt.UTC().Format(time.RFC3339Nano),
		LastError: redact.Text(st.LastError)} // also for an error stored before sinks' errors were redacted
	switch {
	case st.RetryAt.IsZero():
	case st.State == status.Scheduled:
		resp.DeliverAt = st.RetryAt.UTC().Format(time.RFC3339)
	default:
		resp.RetryAt = st.RetryAt.UTC().Format(time.RFC3339)
	}
	if st.State == status.Queued {
		resp.Position = &st.Position
	}
	return resp
}

// writeLocateError answers an error of the Locator: 404 never seen or no longer tracked,
// else 503.
func (s *Server) writeLocateError(w http.ResponseWriter, id string, err error) {
	var gone *status.Gone
	switch {
	case errors.Is(err, status.ErrNeverSeen):
		httpx.WriteProblem(w, httpx.NeverSeen(strconv.Quote(id)+" is not the id of a message of any queue rule in force"))
	case errors.As(err, &gone):
		detail := "the message is in none of its key's queue, the retry stream or the dead letters: it was delivered, " +
			"or removed by a purge. sluice keeps no record of a message once it has left"
		rule, key := gone.Rule, &gone.Key
		if gone.Unread {
			detail += fmt.Sprintf("; or it was stored again (re-admitted, replayed) behind more messages of its key than a lookup reads (%d)",
				status.DefaultMaxRead)
		}
		if gone.Legacy {
			detail = "an id of an earlier version of sluice names no queue; only its dead letter could be found, and there is none"
			rule, key = "", nil
		}
		var issuedAt string
		if !gone.IssuedAt.IsZero() {
			issuedAt = gone.IssuedAt.Format(time.RFC3339)
		}
		httpx.WriteProblem(w, httpx.NotTracked(detail, rule, key, issuedAt))
	default:
		s.cfg.Logger.Warn("ingress: message not readable", "id", id, "err", err)
		httpx.WriteProblem(w, httpx.Unavailable("", "the queue store (NATS JetStream) or Redis did not answer", time.Second))
	}
}

// cancelResponse is DELETE /v1/messages/{id}: what was removed.
type cancelResponse struct {
	statusResponse
	Cancelled bool `json:"cancelled"`
}

// handleCancel removes a message that has not been delivered yet (queued, parked, waiting
// for a delivery retry): 200 with its status as it was; 409 with its state when it is being
// delivered, delivered, dead or moving back into its queue; 404 as GET.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Status.Cancel(r.Context(), id)
	var nc *status.NotCancellable
	switch {
	case errors.As(err, &nc):
		httpx.WriteProblem(w, httpx.NotCancellable("the message is "+nc.Status.State+
			": only a message that is queued, parked or waiting for a delivery retry can be cancelled", nc.Status.State))
		return
	case errors.Is(err, status.ErrOutcomeUnknown):
		s.cfg.Logger.Warn("ingress: cancel sent, outcome unknown", "id", id, "err", err)
		httpx.WriteProblem(w, httpx.OutcomeUnknown("the delete was sent to the queue store (NATS JetStream) and its answer was lost: "+
			"the message may be cancelled. GET it to see; a cancel again answers 404 #no-longer-tracked if this one went through"))
		return
	case err != nil:
		s.writeLocateError(w, id, err)
		return
	}
	s.cfg.Logger.Info("message cancelled", "id", id, "rule", st.Rule, "state", st.State)
	httpx.WriteJSON(w, http.StatusOK, cancelResponse{statusResponse: newStatusResponse(st), Cancelled: true})
}

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
