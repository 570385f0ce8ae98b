// Command drainer releases sluice's per-key queues at their outflow: it claims due keys in
// Redis, pops each key's head from JetStream, delivers it to the rule's sink (HTTP or
// NATS) and deletes it once the sink accepted it. Run any number of drainers against the
// same NATS and Redis; together they keep every per-key and total outflow.
//
// Flags (each with an environment equivalent; the flag wins):
//
//	-rules             SLUICE_RULES             rules files or directories, comma-separated (required)
//	-http              SLUICE_HTTP_ADDR         /metrics, /healthz, /readyz (default :8081)
//	-nats              SLUICE_NATS_URL          NATS URL(s) (default nats://127.0.0.1:4222)
//	-redis             SLUICE_REDIS_URL         redis://, rediss://, unix://, Cluster or Sentinel URL (default redis://127.0.0.1:6379)
//	-workers           SLUICE_WORKERS           deliveries in flight at once per queue rule (default 32; each rule has its own)
//	-lease             SLUICE_LEASE             claim lease: a dead drainer's keys are claimed again within it (default 2.5s)
//	-lease-renew       SLUICE_LEASE_RENEW       renewal period of held leases, at most lease/2 (default lease/3)
//	-replicas          SLUICE_REPLICAS          replicas of the retry/dead-letter streams it ensures (default 1)
//	-shutdown-timeout  SLUICE_SHUTDOWN_TIMEOUT  on SIGTERM: stop claiming, finish in-flight deliveries within this (default 30s)
//	-log-format        SLUICE_LOG_FORMAT        json or text (default json)
//	-log-level         SLUICE_LOG_LEVEL         debug, info, warn, error (default info)
//	-tls-cert, -tls-key SLUICE_TLS_CERT, SLUICE_TLS_KEY  serve -http over TLS, reloaded when the files change (default off)
//	-tls-client-ca     SLUICE_TLS_CLIENT_CA     require client certificates signed by these CAs (default off)
//	-nats-ca           SLUICE_NATS_CA           CA bundle of the NATS servers (default: system roots)
//	-nats-cert, -nats-key SLUICE_NATS_CERT, SLUICE_NATS_KEY  client certificate for NATS (default none)
//	-sink-ca           SLUICE_SINK_CA           CA bundle trusted for https:// sinks (default: system roots)
//	-sign-keys         SLUICE_SIGN_KEYS         HMAC key files, comma-separated: sign HTTP deliveries with the first (default unsigned)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	_ "time/tzdata" // rules' time_zone works in a container without zoneinfo

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/internal/app"
	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/drainer"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/internal/tlsx"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "drainer:", err)
		os.Exit(2)
	}
	stopTracing, err := telemetry.Setup(ctx, "sluice-drainer", os.Getenv) // off unless OTEL_* says otherwise
	if err != nil {
		fmt.Fprintln(os.Stderr, "drainer:", err)
		os.Exit(2)
	}
	defer stopTracing(context.WithoutCancel(ctx))
	if err := m.Run(ctx); err != nil {
		m.Close()
		fmt.Fprintln(os.Stderr, "drainer:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	m.Logger.Info("drainer: shutting down: no more claims, finishing in-flight deliveries", "timeout", m.Config.ShutdownTimeout.String())
	m.Close()
}

// Config is everything the drainer process is told from outside.
type Config struct {
	Rules           []string      // -rules: required
	HTTPAddr        string        // -http: default ":8081"
	NATSURL         string        // -nats: default "nats://127.0.0.1:4222"
	RedisURL        string        // -redis: default "redis://127.0.0.1:6379"
	Workers         int           // -workers: default 32, per queue rule
	Lease           time.Duration // -lease: default 2.5s
	LeaseRenew      time.Duration // -lease-renew: default Lease/3
	Replicas        int           // -replicas: 1 or 3, default 1
	ShutdownTimeout time.Duration // -shutdown-timeout: default 30s
	LogFormat       string        // -log-format: json (default) or text
	LogLevel        string        // -log-level: default info
	RulesPoll       time.Duration // -rules-poll: default 1s
	StatusKeep      time.Duration // -status-keep: records of delivered messages kept this long; default 0 (off)
	StatusKeepMax   int64         // -status-keep-max: most delivered records kept; default 1000000

	TLSCert, TLSKey, TLSClientCA string   // -tls-cert, -tls-key, -tls-client-ca: TLS (and mTLS) on -http; default off
	NATSCA, NATSCert, NATSKey    string   // -nats-ca, -nats-cert, -nats-key: NATS TLS; default system roots, no client certificate
	SinkCA                       string   // -sink-ca: CA bundle of https:// sinks; default system roots
	SignKeys                     []string // -sign-keys: HMAC key files; default none (unsigned)
}

// Main is the drainer process. The same Main runs in cmd/drainer and, whole, in tests.
type Main struct {
	Config Config
	Getenv func(string) string // default os.Getenv
	Stderr io.Writer           // flag errors and logs; default os.Stderr
	Logger *slog.Logger        // default: built from the config by Run

	// Set by Run.
	Addr    net.Addr // the HTTP listener's address (useful with -http :0)
	Drainer *drain.Drainer
	Process *drainer.Process // the drain loop and the re-admitter

	closers []func()
	httpSrv *http.Server
	once    sync.Once
}

// NewMain returns a Main reading os.Getenv and writing to os.Stderr.
func NewMain() *Main { return &Main{Getenv: os.Getenv, Stderr: os.Stderr} }

// ParseFlags reads args (without the program name) and the environment into m.Config.
func (m *Main) ParseFlags(args []string) error {
	getenv := m.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if m.Stderr == nil {
		m.Stderr = os.Stderr
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	c := &m.Config
	fs := flag.NewFlagSet("drainer", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	rulesFlag := fs.String("rules", env("SLUICE_RULES", ""), "rules files or directories, comma-separated (env SLUICE_RULES)")
	fs.StringVar(&c.HTTPAddr, "http", env("SLUICE_HTTP_ADDR", ":8081"), "listen address of /metrics, /healthz, /readyz (env SLUICE_HTTP_ADDR)")
	fs.StringVar(&c.NATSURL, "nats", env("SLUICE_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL(s) (env SLUICE_NATS_URL)")
	fs.StringVar(&c.RedisURL, "redis", env("SLUICE_REDIS_URL", "redis://127.0.0.1:6379"), "Redis URL: redis://, rediss://, unix://, a cluster (redis://h1:p?addr=h2:p&addr=h3:p) or Sentinel (redis+sentinel://s1:26379?master_name=M&addr=s2:26379) (env SLUICE_REDIS_URL)")
	workers := fs.String("workers", env("SLUICE_WORKERS", "32"), "deliveries in flight at once per queue rule; each rule has its own (env SLUICE_WORKERS)")
	lease := fs.String("lease", env("SLUICE_LEASE", "2.5s"), "claim lease: renewed while a key is held; a dead drainer's keys are claimed again within it (env SLUICE_LEASE)")
	leaseRenew := fs.String("lease-renew", env("SLUICE_LEASE_RENEW", ""), "renewal period of held leases, at most lease/2; empty = lease/3 (env SLUICE_LEASE_RENEW)")
	replicas := fs.String("replicas", env("SLUICE_REPLICAS", "1"), "replicas of the retry and dead-letter streams, 1 or 3 (env SLUICE_REPLICAS)")
	shutdown := fs.String("shutdown-timeout", env("SLUICE_SHUTDOWN_TIMEOUT", "30s"), "time to finish in-flight deliveries on SIGTERM (env SLUICE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.LogFormat, "log-format", env("SLUICE_LOG_FORMAT", "json"), "json or text (env SLUICE_LOG_FORMAT)")
	fs.StringVar(&c.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	poll := fs.String("rules-poll", env("SLUICE_RULES_POLL", "1s"), "how often rules files are checked for changes (env SLUICE_RULES_POLL)")
	keep, err := time.ParseDuration(env("SLUICE_STATUS_KEEP", "0s"))
	if err != nil || keep < 0 {
		return fmt.Errorf("SLUICE_STATUS_KEEP: want a duration such as 1h, got %q", getenv("SLUICE_STATUS_KEEP"))
	}
	fs.DurationVar(&c.StatusKeep, "status-keep", keep, "keep a record of each delivered message this long, for GET /v1/messages/{id}; 0 = off (env SLUICE_STATUS_KEEP)")
	keepMax, err := strconv.ParseInt(env("SLUICE_STATUS_KEEP_MAX", "1000000"), 10, 64)
	if err != nil || keepMax <= 0 {
		return fmt.Errorf("SLUICE_STATUS_KEEP_MAX: want a positive number, got %q", getenv("SLUICE_STATUS_KEEP_MAX"))
	}
	fs.Int64Var(&c.StatusKeepMax, "status-keep-max", keepMax, "most delivered records kept, oldest dropped first (env SLUICE_STATUS_KEEP_MAX)")
	fs.StringVar(&c.TLSCert, "tls-cert", env("SLUICE_TLS_CERT", ""), "PEM certificate of the -http listener; reloaded when it changes (env SLUICE_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", env("SLUICE_TLS_KEY", ""), "PEM private key of -tls-cert (env SLUICE_TLS_KEY)")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", env("SLUICE_TLS_CLIENT_CA", ""), "PEM CA bundle: require client certificates it signed (env SLUICE_TLS_CLIENT_CA)")
	fs.StringVar(&c.NATSCA, "nats-ca", env("SLUICE_NATS_CA", ""), "PEM CA bundle of the NATS servers (env SLUICE_NATS_CA)")
	fs.StringVar(&c.NATSCert, "nats-cert", env("SLUICE_NATS_CERT", ""), "PEM client certificate for NATS (env SLUICE_NATS_CERT)")
	fs.StringVar(&c.NATSKey, "nats-key", env("SLUICE_NATS_KEY", ""), "PEM private key of -nats-cert (env SLUICE_NATS_KEY)")
	fs.StringVar(&c.SinkCA, "sink-ca", env("SLUICE_SINK_CA", ""), "PEM CA bundle trusted for https:// sinks (env SLUICE_SINK_CA)")
	signKeys := fs.String("sign-keys", env("SLUICE_SIGN_KEYS", ""), "HMAC key files, comma-separated; HTTP deliveries are signed with the first (env SLUICE_SIGN_KEYS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, p := range strings.Split(*signKeys, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.SignKeys = append(c.SignKeys, p)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("-tls-cert and -tls-key: give both or neither")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("-tls-client-ca: needs -tls-cert and -tls-key")
	}
	if (c.NATSCert == "") != (c.NATSKey == "") {
		return errors.New("-nats-cert and -nats-key: give both or neither")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, p := range strings.Split(*rulesFlag, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Rules = append(c.Rules, p)
		}
	}
	if len(c.Rules) == 0 {
		return errors.New("-rules is required (a rules file or directory; see deploy/examples)")
	}
	if c.StatusKeepMax <= 0 {
		return fmt.Errorf("-status-keep-max: want a positive number of records, got %d", c.StatusKeepMax)
	}
	if c.Workers, err = strconv.Atoi(*workers); err != nil || c.Workers < 1 {
		return fmt.Errorf("-workers: want a positive number, got %q", *workers)
	}
	if c.Replicas, err = strconv.Atoi(*replicas); err != nil || (c.Replicas != 1 && c.Replicas != 3) {
		return fmt.Errorf("-replicas: want 1 or 3, got %q", *replicas)
	}
	if c.Lease, err = time.ParseDuration(*lease); err != nil || c.Lease < 500*time.Millisecond {
		return fmt.Errorf("-lease: want a duration of at least 500ms, got %q", *lease)
	}
	if *leaseRenew != "" {
		if c.LeaseRenew, err = time.ParseDuration(*leaseRenew); err != nil || c.LeaseRenew <= 0 || c.LeaseRenew > c.Lease/2 {
			return fmt.Errorf("-lease-renew: want a positive duration of at most -lease/2 (%s), got %q", c.Lease/2, *leaseRenew)
		}
	}
	if c.ShutdownTimeout, err = time.ParseDuration(*shutdown); err != nil || c.ShutdownTimeout <= 0 {
		return fmt.Errorf("-shutdown-timeout: want a positive duration, got %q", *shutdown)
	}
	if c.RulesPoll, err = time.ParseDuration(*poll); err != nil || c.RulesPoll <= 0 {
		return fmt.Errorf("-rules-poll: want a positive duration, got %q", *poll)
	}
	if _, err := app.ParseRedisURL(c.RedisURL, 0); err != nil {
		return err
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("-log-format: want json or text, got %q", c.LogFormat)
	}
	return nil
}

func (m *Main) newLogger() *slog.Logger {
	level := slog.LevelInfo
	switch strings.ToLower(m.Config.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	w := m.Stderr
	if w == nil {
		w = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: level}
	if m.Config.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// Run connects to NATS and Redis, starts draining and serves /metrics, /healthz and
// /readyz. It returns once everything runs; stop it with Close (a soft stop). ctx only
// bounds the start: cancelling it later does not stop the drainer (SIGTERM → Close).
func (m *Main) Run(ctx context.Context) (err error) {
	c := m.Config
	if m.Logger == nil {
		m.Logger = m.newLogger()
	}
	log := m.Logger
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	bg := context.WithoutCancel(ctx)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var tlsSrv *tlsx.Server
	if c.TLSCert != "" {
		if tlsSrv, err = tlsx.NewServer(tlsx.ServerFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA, Logger: log}); err != nil {
			return fmt.Errorf("drainer: %w", err)
		}
	}
	if tlsSrv != nil {
		reg.MustRegister(tlsSrv.NotAfterCollector())
	}
	sinkTLS, err := tlsx.NewClient("-sink-ca", c.SinkCA)
	if err != nil {
		return fmt.Errorf("drainer: %w", err)
	}
	signer, err := sign.NewSigner(c.SignKeys, log)
	if err != nil {
		return fmt.Errorf("drainer: %w", err)
	}

	// Rules first: a process with bad rules must not start.
	watcher, err := rules.NewWatcher(rules.WatcherConfig{Paths: c.Rules, Interval: c.RulesPoll, Logger: log})
	if err != nil {
		return fmt.Errorf("drainer: rules: %w", err)
	}
	wctx, wcancel := context.WithCancel(bg)
	m.closers = append(m.closers, wcancel)
	if err := watcher.Start(wctx); err != nil {
		return fmt.Errorf("drainer: rules: %w", err)
	}
	m.closers = append(m.closers, watcher.Stop)

	st, err := app.Open(ctx, app.Config{
		Name: "drainer", NATSURL: c.NATSURL, RedisURL: c.RedisURL, Replicas: c.Replicas,
		NATSCA: c.NATSCA, NATSCert: c.NATSCert, NATSKey: c.NATSKey,
		StatusKeep: c.StatusKeep, StatusKeepMax: c.StatusKeepMax,
		Rules: watcher.Current, Logger: log, RedisPoolSize: 2*c.Workers + 16,
	})
	if err != nil {
		return err
	}
	m.closers = append(m.closers, st.Close)
	proc, err := drainer.Start(bg, drainer.Deps{
		Stack: st, Rules: watcher.Current, Logger: log, Registerer: reg,
		SinkTLS: sinkTLS, Signer: signer,
		Drain: drain.Config{Workers: c.Workers, StopTimeout: c.ShutdownTimeout, Lease: c.Lease, LeaseRenew: c.LeaseRenew},
	})
	if err != nil {
		return err
	}
	m.Process = proc
	m.Drainer = proc.Drainer

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Ready(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("drainer: listen %s: %w", c.HTTPAddr, err)
	}
	m.Addr = ln.Addr()
	// The ingress's limits (README "Hostile input"): slow or huge requests are cut off.
	m.httpSrv = &http.Server{Handler: mux, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ReadHeaderTimeout: httpx.ReadHeaderTimeout, ReadTimeout: httpx.ReadTimeout,
		WriteTimeout: httpx.WriteTimeout, IdleTimeout: httpx.IdleTimeout, MaxHeaderBytes: httpx.MaxHeaderBytes}
	serve := m.httpSrv.Serve
	if tlsSrv != nil {
		m.httpSrv.TLSConfig = tlsSrv.Config()
		serve = func(ln net.Listener) error { return m.httpSrv.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("drainer: HTTP server stopped", "err", err)
		}
	}()
	log.Info("drainer: running", "addr", m.Addr.String(), "tls", tlsSrv != nil, "nats", c.NATSURL, "queue_rules", len(watcher.Current().QueueRules()), "workers", c.Workers, "owner", proc.Drainer.Owner())
	return nil
}

// Close stops the process: no more claims, in-flight deliveries finish (within the
// shutdown timeout, then they are cancelled and stay queued), then the HTTP server and the
// connections. Safe to call twice.
func (m *Main) Close() {
	m.once.Do(func() {
		if m.Process != nil {
			m.Process.Stop()
		}
		if m.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m.httpSrv.Shutdown(ctx)
			cancel()
		}
		for i := len(m.closers) - 1; i >= 0; i-- {
			m.closers[i]()
		}
	})
}
