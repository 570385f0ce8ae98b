package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/app"
	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/devenv"
	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/drainer"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// Main is the ingress process: it runs in cmd/ingress and, whole, in tests.
type Main struct {
	Config Config
	Stdout io.Writer // where -dev prints its banner; default os.Stdout
	Logger *slog.Logger
	// Now is the clock of admissions and checks; default time.Now. Tests freeze it to
	// compare answers that depend on time.
	Now func() time.Time

	// Set by Run.
	Server    *Server
	Addr      net.Addr // the HTTP listener's address (useful with -http :0)
	GRPCAddr  net.Addr // the gRPC listener's address; nil when -grpc is empty
	DebugAddr net.Addr // the pprof listener's address; nil without -debug-addr
	NATSURL   string
	RedisURL  string
	SinkURL   string           // -dev demo sink
	Drainer   *drainer.Process // the in-process drainer (-drain), or nil
	Stack     *app.Stack       // connections, streams, admission
	TLS       *tlsx.Server     // the listeners' certificates (-tls-cert); nil = plain text

	closers []func()
	httpSrv *http.Server
	grpcSrv *GRPCServer
	done    chan struct{}
	once    sync.Once
}

// Limits of the HTTP listener (README "Hostile input"): what a slow or hostile client can
// hold of a connection. The drainer's listener has the same (httpx).
const (
	DefaultReadHeaderTimeout = httpx.ReadHeaderTimeout // -read-header-timeout
	ReadTimeout              = httpx.ReadTimeout
	WriteTimeout             = httpx.WriteTimeout
	IdleTimeout              = httpx.IdleTimeout
	MaxHeaderBytes           = httpx.MaxHeaderBytes // more is 431; also bounds the gRPC listener's header list
)

// NewLogger builds the process logger from the config.
func NewLogger(c Config, w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// Run starts everything and returns once the HTTP server is listening. Stop it with Close.
func (m *Main) Run(ctx context.Context) (err error) {
	c := m.Config
	if m.Logger == nil {
		m.Logger = NewLogger(c, os.Stderr)
	}
	if m.Stdout == nil {
		m.Stdout = os.Stdout
	}
	log := m.Logger
	m.done = make(chan struct{})
	defer func() {
		if err != nil {
			m.Close()
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Certificates and secrets next: a process that cannot serve as configured must not
	// start.
	if c.TLSCert != "" {
		if m.TLS, err = tlsx.NewServer(tlsx.ServerFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA, Logger: log}); err != nil {
			return fmt.Errorf("ingress: %w", err)
		}
		reg.MustRegister(m.TLS.NotAfterCollector())
	}
	sinkTLS, err := tlsx.NewClient("-sink-ca", c.SinkCA)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	signer, err := sign.NewSigner(c.SignKeys, log)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	auth, err := openAuth(c, log)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}

	// Rules first: a process with bad rules must not start.
	var srv *Server
	watcher, err := rules.NewWatcher(rules.WatcherConfig{
		Paths: c.Rules, Interval: c.RulesPoll, Logger: log, Options: rules.Options{MergeDomains: c.MergeDomainConfig},
		OnReload: func(set *rules.Set, err error) {
			if srv != nil {
				srv.RulesReloaded(set, err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("ingress: rules: %w", err)
	}

	m.NATSURL, m.RedisURL = c.NATSURL, c.RedisURL
	if c.Dev {
		if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
			return fmt.Errorf("ingress: -data: %w", err)
		}
		ns, err := devenv.StartNATS(c.DataDir, c.DevNATSAddr)
		if err != nil {
			return err
		}
		m.closers = append(m.closers, ns.Close)
		rs, err := devenv.StartRedis()
		if err != nil {
			return err
		}
		m.closers = append(m.closers, rs.Close)
		sink, err := devenv.StartSink(c.DevSinkAddr, log)
		if err != nil {
			return err
		}
		m.closers = append(m.closers, func() { sink.Close(context.Background()) })
		m.NATSURL, m.RedisURL, m.SinkURL = ns.URL(), rs.URL(), sink.URL()
	}

	var limits bucket.Store
	if c.Dev {
		limits = bucket.NewMemory(bucket.MemoryConfig{}) // the in-process limiter store of -dev
	}
	capacityChanged := make(chan struct{}, 1)
	st, err := app.Open(ctx, app.Config{
		Name: "ingress", NATSURL: m.NATSURL, RedisURL: m.RedisURL, Replicas: c.Replicas,
		NATSCA: c.NATSCA, NATSCert: c.NATSCert, NATSKey: c.NATSKey,
		Rules: watcher.Current, Limits: limits, Logger: log,
		IdempotencyTTL: c.IdempotencyTTL, StatusKeep: c.StatusKeep, StatusKeepMax: c.StatusKeepMax,
		OnDegraded: func(on bool) {
			if srv != nil {
				srv.SetDegraded(on)
			}
		},
		// An override changed: re-apply effective capacities to the streams.
		OnOverride: func(string) {
			select {
			case capacityChanged <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	m.closers = append(m.closers, st.Close)
	m.Stack = st

	// Every queue rule's stream must exist, at its effective capacity (not the rules
	// file's, or a restarted ingress would undo a PATCH), before admitting.
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ensureStreams(startCtx, st.Queues, watcher.Current(), st.Effective); err != nil {
		return err
	}

	auditLog := audit.New(st.JS, audit.Config{MaxAge: c.AuditKeep, MaxMsgs: c.AuditMax, Replicas: c.Replicas, Logger: log})
	// Its own 30 s: on a fresh cluster whose processes all start at once, the streams above
	// may have used most of theirs.
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	if err := app.Retry(actx, auditLog.Ensure); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	admin := &Admin{Audit: auditLog, Rules: watcher.Current, Overrides: st.Overrides, Current: st.Current, Queues: st.Queues, Scheduler: st.Scheduler,
		JS: st.JS, Parking: st.Parking, Dead: st.Dead, Admitter: st.Admitter, Logger: log}
	srv = NewServer(ServerConfig{
		Rules: watcher.Current, Admitter: st.Admitter, Status: st.Status, Limits: st.Limits,
		Admin: admin, Auth: auth, MaxBody: c.MaxBody, MaxBatch: c.MaxBatch, MaxDelay: c.MaxDelay, Registry: reg, Logger: log,
		Ready: st.Ready, GRPCResponseHeaders: c.GRPCResponseHeaders, Now: m.Now,
		Envoy: EnvoyConfig{ShadowMode: c.ShadowMode, QuotaMode: c.QuotaMode, ResponseDynamicMetadata: c.ResponseDynamicMetadata,
			LocalCacheBytes: c.LocalCacheBytes, DetailedMetricValues: c.DetailedMetricValues},
	})
	m.Server = srv
	srv.RulesReloaded(watcher.Current(), nil)

	if c.Drain {
		proc, err := drainer.Start(context.WithoutCancel(ctx), drainer.Deps{
			Stack: st, Rules: watcher.Current, Logger: log, Registerer: reg,
			SinkTLS: sinkTLS, Signer: signer,
			Drain:   drain.Config{Workers: c.DrainWorkers, StopTimeout: c.ShutdownTimeout},
			Readmit: retry.ReadmitterConfig{MaxBackoff: c.ReadmitMaxBackoff},
		})
		if err != nil {
			return err
		}
		m.Drainer = proc
		m.closers = append(m.closers, proc.Stop)
	}

	// Reloads: keep streams in step with the rules (new queue rules, capacity changes).
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	m.closers = append(m.closers, wcancel, watcher.Stop)
	if err := watcher.Start(wctx); err != nil {
		return err
	}
	go func() {
		var last *rules.Set = watcher.Current()
		t := time.NewTicker(c.RulesPoll)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			case <-capacityChanged:
				last = nil // an override changed: re-apply effective capacities
			}
			if cur := watcher.Current(); cur != last {
				ectx, cancel := context.WithTimeout(wctx, 30*time.Second)
				if err := ensureStreams(ectx, st.Queues, cur, st.Effective); err != nil {
					log.Error("ingress: streams not updated after a rules or override change", "err", err)
				} else {
					last = cur
				}
				cancel()
			}
		}
	}()

	go srv.FlushRefusals(wctx, st.Scheduler, time.Second)

	if st.Degraded != nil {
		peers := &peerCounter{nc: st.NATS, log: log, onChange: st.Degraded.SetProcesses}
		if err := peers.Start(wctx); err != nil {
			log.Warn("ingress: live ingress count unavailable; degraded limits assume 1 process", "err", err)
		}
	}

	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ingress: listen %s: %w", c.HTTPAddr, err)
	}
	m.Addr = ln.Addr()
	m.httpSrv = &http.Server{
		Handler: srv,
		// TLS handshake errors (probes, scanners) at debug level, not on stderr.
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	if m.httpSrv.ReadHeaderTimeout <= 0 { // a Config built by hand
		m.httpSrv.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	serve := m.httpSrv.Serve
	if m.TLS != nil {
		m.httpSrv.TLSConfig = m.TLS.Config()
		serve = func(ln net.Listener) error { return m.httpSrv.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ingress: HTTP server stopped", "err", err)
		}
	}()
	if c.GRPCAddr != "" {
		gln, err := net.Listen("tcp", c.GRPCAddr)
		if err != nil {
			return fmt.Errorf("ingress: listen -grpc %s: %w", c.GRPCAddr, err)
		}
		m.GRPCAddr = gln.Addr()
		gc := GRPCConfig{MaxRecvMsgSize: int(min(c.MaxBody, 1<<30)), Logger: log}
		if m.TLS != nil {
			gc.TLS = m.TLS.Config()
		}
		m.grpcSrv = srv.NewGRPCServer(gc)
		go func() {
			if err := m.grpcSrv.Serve(gln); err != nil {
				log.Error("ingress: gRPC server stopped", "err", err)
			}
		}()
		log.Info("ingress: envoy rate limit service listening (gRPC)", "addr", m.GRPCAddr.String())
	}
	if c.DebugAddr != "" {
		dln, err := net.Listen("tcp", c.DebugAddr)
		if err != nil {
			return fmt.Errorf("ingress: listen -debug-addr %s: %w", c.DebugAddr, err)
		}
		m.DebugAddr = dln.Addr()
		dbg := &http.Server{Handler: debugMux(), ReadHeaderTimeout: DefaultReadHeaderTimeout, MaxHeaderBytes: MaxHeaderBytes, IdleTimeout: IdleTimeout}
		m.closers = append(m.closers, func() { dbg.Close() })
		go dbg.Serve(dln)
		log.Info("ingress: pprof listening", "addr", dln.Addr().String())
	}
	log.Info("ingress: listening", "addr", m.Addr.String(), "tls", m.TLS != nil, "mtls", c.TLSClientCA != "", "nats", m.NATSURL, "rules", len(watcher.Current().Rules()), "dev", c.Dev)
	if c.Dev {
		m.printBanner(watcher.Current())
	}
	return nil
}

func (m *Main) printBanner(set *rules.Set) {
	port := m.Addr.(*net.TCPAddr).Port
	scheme := "http"
	if m.TLS != nil {
		scheme = "https"
	}
	fmt.Fprintf(m.Stdout, "\nsluice is running (dev mode: embedded NATS at %s, data in %s)\n", m.NATSURL, m.Config.DataDir)
	fmt.Fprintf(m.Stdout, "  API:       %s://localhost:%d   (metrics: /metrics)\n", scheme, port)
	if m.Config.AdminToken != "" || m.Config.AdminTokenFile != "" || m.Config.AdminTokensFile != "" {
		fmt.Fprintf(m.Stdout, "  console:   %s://localhost:%d/ui/   (sign in with an admin token)\n", scheme, port)
	} else {
		fmt.Fprintf(m.Stdout, "  console:   %s://localhost:%d/ui/   (start with -admin-token to sign in)\n", scheme, port)
	}
	if m.GRPCAddr != nil {
		fmt.Fprintf(m.Stdout, "  envoy RLS: localhost:%d (gRPC, envoy.service.ratelimit.v3.RateLimitService)\n", m.GRPCAddr.(*net.TCPAddr).Port)
	}
	fmt.Fprintf(m.Stdout, "  demo sink: %s (logs every delivery)\n", m.SinkURL)
	fmt.Fprintf(m.Stdout, "  rules:     %d from %s\n\n", len(set.Rules()), strings.Join(m.Config.Rules, ","))
	// The example rules deliver to the demo sink's default address; moved elsewhere with
	// -dev-sink-addr, their deliveries would fail and be retried with nothing said.
	if sink, err := url.Parse(m.SinkURL); err == nil {
		for _, r := range set.QueueRules() {
			u, err := url.Parse(r.Sink.URL)
			if err == nil && r.Sink.URL != "" && u.Port() == "8090" && isLoopback(u.Hostname()) && u.Host != sink.Host {
				fmt.Fprintf(m.Stdout, "  note: rule %q delivers to %s, but the demo sink listens on %s: edit its sink url\n\n", r.Name, r.Sink.URL, sink.Host)
			}
		}
	}
	fmt.Fprintf(m.Stdout, "Try it — 30 orders for one merchant, delivered at its outflow:\n")
	fmt.Fprintf(m.Stdout, "  for i in $(seq 30); do curl -s localhost:%d/v1/messages -H 'Content-Type: application/json' \\\n", port)
	fmt.Fprintf(m.Stdout, "    -d '{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m-42\"}],\"payload\":{\"order_id\":'$i'}}'; echo; done\n\n")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openAuth reads the admin and submit tokens of the config.
func openAuth(c Config, log *slog.Logger) (*Auth, error) {
	a := &Auth{}
	if c.AdminToken != "" {
		a.Static = []Token{NewStaticToken("admin-token", ScopeOperate, c.AdminToken)}
	}
	var err error
	if c.AdminTokenFile != "" {
		a.File = &TokenFile{path: c.AdminTokenFile, flag: "-admin-token-file", single: true, log: log}
		if err := a.File.reload(); err != nil {
			return nil, err
		}
	}
	if c.AdminTokensFile != "" {
		if a.Admin, err = OpenTokenFile("-admin-tokens", c.AdminTokensFile, true, log); err != nil {
			return nil, err
		}
	}
	if c.SubmitTokensFile != "" {
		if a.Submit, err = OpenTokenFile("-submit-tokens", c.SubmitTokensFile, false, log); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Close stops the process: HTTP first (stop admitting, finish in-flight requests within
// the shutdown timeout), then everything else in reverse start order. Safe to call twice.
func (m *Main) Close() {
	m.once.Do(func() {
		// Both listeners stop taking new work at once and share the shutdown timeout.
		var wg sync.WaitGroup
		if m.grpcSrv != nil {
			wg.Go(func() { m.grpcSrv.Stop(m.Config.ShutdownTimeout) })
		}
		if m.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
			m.httpSrv.Shutdown(ctx)
			cancel()
		}
		wg.Wait()
		for i := len(m.closers) - 1; i >= 0; i-- {
			m.closers[i]()
		}
		if m.done != nil {
			close(m.done)
		}
	})
}

// ensureStreams creates or updates the stream of every queue rule at its effective capacity.
func ensureStreams(ctx context.Context, q *queue.Queues, set *rules.Set, effective func(*rules.Rule) *rules.Rule) error {
	for _, r := range set.QueueRules() {
		eq := effective(r).Queue
		err := app.Retry(ctx, func(ctx context.Context) error {
			return q.EnsureLimits(ctx, r.Name, queue.Limits{Capacity: eq.Capacity, MaxBytes: eq.MaxBytes})
		})
		if err != nil {
			return fmt.Errorf("ingress: %w", err)
		}
	}
	return nil
}

// debugMux serves net/http/pprof's handlers (not on the default mux, which this process
// never serves).
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
