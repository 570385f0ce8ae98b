package submit

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/queue"
)

// Config holds what the submission service needs. Rules, Admitter and Status are
// required; the zero values of the others are their defaults.
type Config struct {
	Rules    func() *rules.Set // the rules in force (hot-reloaded)
	Admitter *admit.Admitter
	Status   *status.Locator
	// Bodies reads request bodies (the server's, shared with the check service); nil reads
	// up to 1 MiB.
	Bodies   *httpx.Bodies
	MaxBatch int // most messages in one batch submission; default DefaultMaxBatch
	// MaxDelay is how far ahead a deliver_at or delay may be; default DefaultMaxDelay.
	MaxDelay time.Duration
	// Unavailable is the Retry-After of a 503 while NATS cannot store. Default 2s.
	Unavailable time.Duration
	// CallerOf is what the transport's authentication says of a request's caller (its
	// context); nil, or false, for none (open mode).
	CallerOf func(ctx context.Context) (Caller, bool)
	Registry prometheus.Registerer // sluice_admissions_total; nil: not registered
	// Logger's messages keep the "ingress: " prefix they had before the service left
	// internal/ingress: operators' alerts and searches match it.
	Logger *slog.Logger
	Now    func() time.Time
}

// Caller is the token that authenticated a request, as the service needs it: its name,
// whether it is a submit token, and the one domain it is for ("" for every domain).
type Caller struct {
	Name   string
	Submit bool
	Domain string
}

// Service is the submission service: POST /v1/messages (one submission or a batch),
// GET and DELETE /v1/messages/{id}. Create it with New; it is safe for concurrent use.
type Service struct {
	cfg        Config
	admissions *prometheus.CounterVec // sluice_admissions_total{rule,decision}
	refused    refusals
}

// New builds the service and registers its metric on cfg.Registry.
func New(cfg Config) *Service {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.Unavailable <= 0 {
		cfg.Unavailable = 2 * time.Second
	}
	if cfg.Bodies == nil {
		cfg.Bodies = &httpx.Bodies{Max: 1 << 20}
	}
	if cfg.CallerOf == nil {
		cfg.CallerOf = func(context.Context) (Caller, bool) { return Caller{}, false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_admissions_total",
		Help: "Requests to POST /v1/messages by rule and decision (queued, parked, rejected, duplicate, error).",
	}, []string{"rule", "decision"})}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(s.admissions)
	}
	return s
}

// HandleSubmit is POST /v1/messages: one submission, or a batch (a JSON array or NDJSON).
// The transport authenticates the caller first (Config.CallerOf) and may trace it.
func (s *Service) HandleSubmit(w http.ResponseWriter, r *http.Request) { s.serveSubmit(w, r) }

// HandleStatus is GET /v1/messages/{id}.
func (s *Service) HandleStatus(w http.ResponseWriter, r *http.Request) { s.handleStatus(w, r) }

// HandleCancel is DELETE /v1/messages/{id}.
func (s *Service) HandleCancel(w http.ResponseWriter, r *http.Request) { s.handleCancel(w, r) }

// readBody reads the request body up to Bodies.Max; a larger body is a 413.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *[]byte, *httpx.Problem) {
	return s.cfg.Bodies.Read(w, r)
}

func (s *Service) releaseBody(bp *[]byte) { s.cfg.Bodies.Release(bp) }

// Admission decisions (sluice_admissions_total{decision}).
const (
	decisionQueued    = "queued"
	decisionParked    = "parked"
	decisionScheduled = "scheduled"
	decisionRejected  = "rejected"
	decisionDuplicate = "duplicate"
	decisionError     = "error"
)

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
func (s *Service) FlushRefusals(ctx context.Context, sched *queue.Scheduler, every time.Duration) {
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
