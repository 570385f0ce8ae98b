package process

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/retry"
)

// RunDrainer is the drainer binary: flags, -version, or the process until ctx ends, then
// a soft stop (no more claims, in-flight deliveries finish within -shutdown-timeout).
func RunDrainer(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := ParseDrainerFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.Version {
		fmt.Fprintln(stdout, "drainer", Version())
		return nil
	}
	stopTracing, err := telemetry.Setup(ctx, "sluice-drainer", getenv) // off unless OTEL_* says otherwise
	if err != nil {
		return err
	}
	defer stopTracing(context.WithoutCancel(ctx))
	m := &Drainer{Config: cfg, Logger: NewLogger(cfg.LogFormat, cfg.LogLevel, stderr)}
	if err := m.Run(ctx); err != nil {
		return err
	}
	return WaitForStop(ctx, m.Logger, "drainer", cfg.ShutdownTimeout, m.Close)
}

// DrainerConfig is everything the drainer process is told from outside. Every field is a
// flag with a SLUICE_* environment variable (the flag wins); defaults are in
// drainerFlags and the README's table.
type DrainerConfig struct {
	Rules             []string      // -rules: required
	HTTPAddr          string        // -http: /metrics, /healthz, /readyz. Default ":8082" (the ingress has :8080 and :8081).
	DebugAddr         string        // -debug-addr: pprof; default empty (off)
	NATSURL           string        // -nats: default "nats://127.0.0.1:4222"
	RedisURL          string        // -redis: default "redis://127.0.0.1:6379"
	Workers           int           // -workers: deliveries in flight per queue rule; default 32
	Lease             time.Duration // -lease: default 2.5s, at least 500ms
	LeaseRenew        time.Duration // -lease-renew: default 0s = Lease/3; at most Lease/2
	Engine            string        // -engine: claim (default) or own
	OwnPartitions     int           // -own-partitions: ownership partitions per rule (engine own); default 16
	OwnLease          time.Duration // -own-lease: ownership lease (engine own); default 1.5s
	RepairEvery       time.Duration // -repair-every: stream listing for unnoticed keys (engine own); default 30s
	Replicas          int           // -replicas: 1 or 3, default 1
	RetryMaxBytes     int64         // -retry-max-bytes: default 1GiB (as the ingress's)
	DeadMaxBytes      int64         // -dead-max-bytes: default 1GiB (as the ingress's)
	DeadDropOldest    bool          // -dead-drop-oldest: default false (a full dead-letter stream refuses; the message waits)
	ShutdownTimeout   time.Duration // -shutdown-timeout: default 30s
	LogFormat         string        // -log-format: json (default) or text
	LogLevel          string        // -log-level: default info
	RulesPoll         time.Duration // -rules-poll: default 1s
	StatusKeep        time.Duration // -status-keep: records of delivered messages kept this long; default 0s (off)
	StatusKeepMax     int64         // -status-keep-max: most delivered records kept; default 1000000
	ReadmitMaxBackoff time.Duration // -readmit-max-backoff: longest wait between re-admission attempts of a parked message; default 5m

	TLSCert, TLSKey, TLSClientCA string   // -tls-cert, -tls-key, -tls-client-ca: TLS (and mTLS) on -http; default off
	TLSClientNames               []string // -tls-client-names: client certificates must name one of these; default any the CA signed
	RedisCA, RedisCert, RedisKey string   // -redis-ca, -redis-cert, -redis-key: TLS to a rediss:// Redis; default system roots, no client certificate
	NATSCA, NATSCert, NATSKey    string   // -nats-ca, -nats-cert, -nats-key: NATS TLS; default system roots, no client certificate
	NATSCreds, NATSNKey          string   // -nats-creds, -nats-nkey: NATS user credentials (JWT) or NKey seed file; default none
	SinkCA                       string   // -sink-ca: CA bundle of https:// sinks; default system roots
	SignKeys                     []string // -sign-keys: HMAC key files; default none (unsigned)
	SignScheme                   string   // -sign-scheme: sluice (default) or standard-webhooks

	Version bool // -version: print the version and exit
}

func drainerFlags(c *DrainerConfig, getenv func(string) string, stderr io.Writer) *FlagSet {
	f := NewFlagSet("drainer", getenv, stderr)
	f.List(&c.Rules, "rules", "SLUICE_RULES", "", "rules files or directories, comma-separated (required)")
	f.String(&c.HTTPAddr, "http", "SLUICE_HTTP_ADDR", ":8082", "listen address of /metrics, /healthz, /readyz")
	f.String(&c.DebugAddr, "debug-addr", "SLUICE_DEBUG_ADDR", "", "pprof listen address, e.g. 127.0.0.1:6071; empty disables")
	f.String(&c.NATSURL, "nats", "SLUICE_NATS_URL", "nats://127.0.0.1:4222", "NATS URL(s), comma-separated")
	f.String(&c.RedisURL, "redis", "SLUICE_REDIS_URL", "redis://127.0.0.1:6379", "Redis URL: redis://, rediss://, unix://, a cluster (redis://h1:p?addr=h2:p) or Sentinel (redis+sentinel://s1:26379?master_name=M)")
	f.Int(&c.Workers, "workers", "SLUICE_WORKERS", 32, "deliveries in flight at once per queue rule; each rule has its own")
	f.Duration(&c.Lease, "lease", "SLUICE_LEASE", 2500*time.Millisecond, "claim lease: a dead drainer's keys are claimed again within it")
	f.Duration(&c.LeaseRenew, "lease-renew", "SLUICE_LEASE_RENEW", 0, "renewal period of held leases, at most lease/2; 0s = lease/3")
	f.String(&c.Engine, "engine", "SLUICE_ENGINE", "claim", "how drainers share keys: claim (each key claimed in Redis) or own (whole partitions owned, keys paced in memory); every drainer must run the same")
	f.Int(&c.OwnPartitions, "own-partitions", "SLUICE_OWN_PARTITIONS", 16, "engine own: ownership partitions per rule, the unit drainers share")
	f.Duration(&c.OwnLease, "own-lease", "SLUICE_OWN_LEASE", 1500*time.Millisecond, "engine own: ownership lease, renewed every third of it; a dead drainer's partitions are owned again within lease + lease/3")
	f.Duration(&c.RepairEvery, "repair-every", "SLUICE_REPAIR_EVERY", 30*time.Second, "engine own: how often each rule's stream is listed for keys with messages no notice announced (the longest such a key waits)")
	f.Int(&c.Replicas, "replicas", "SLUICE_REPLICAS", 1, "replicas of the retry and dead-letter streams, 1 or 3")
	f.Bytes(&c.RetryMaxBytes, "retry-max-bytes", "SLUICE_RETRY_MAX_BYTES", DefaultRetryMaxBytes, "JetStream storage of the retry stream (parked messages)")
	f.Bytes(&c.DeadMaxBytes, "dead-max-bytes", "SLUICE_DEAD_MAX_BYTES", DefaultDeadMaxBytes, "JetStream storage of the dead-letter stream")
	f.Bool(&c.DeadDropOldest, "dead-drop-oldest", "SLUICE_DEAD_DROP_OLDEST", false, "when the dead letters are full, delete the oldest (counted) instead of keeping the failed message in its queue")
	f.Duration(&c.StatusKeep, "status-keep", "SLUICE_STATUS_KEEP", 0, "keep a record of each delivered message this long, for GET /v1/messages/{id}; 0s = off")
	f.Int64(&c.StatusKeepMax, "status-keep-max", "SLUICE_STATUS_KEEP_MAX", 1_000_000, "most delivered records kept, oldest dropped first")
	f.Duration(&c.ReadmitMaxBackoff, "readmit-max-backoff", "SLUICE_READMIT_MAX_BACKOFF", 5*time.Minute, "longest wait between re-admission attempts of a parked message")
	f.Duration(&c.ShutdownTimeout, "shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT", 30*time.Second, "on SIGTERM: stop claiming, finish in-flight deliveries within this")
	f.Duration(&c.RulesPoll, "rules-poll", "SLUICE_RULES_POLL", time.Second, "how often rules files are checked for changes")
	f.String(&c.LogFormat, "log-format", "SLUICE_LOG_FORMAT", "json", "json or text")
	f.String(&c.LogLevel, "log-level", "SLUICE_LOG_LEVEL", "info", "debug, info, warn or error")
	f.String(&c.TLSCert, "tls-cert", "SLUICE_TLS_CERT", "", "PEM certificate of the -http listener; reloaded when it changes")
	f.String(&c.TLSKey, "tls-key", "SLUICE_TLS_KEY", "", "PEM private key of -tls-cert")
	f.String(&c.TLSClientCA, "tls-client-ca", "SLUICE_TLS_CLIENT_CA", "", "PEM CA bundle: require client certificates it signed")
	f.List(&c.TLSClientNames, "tls-client-names", "SLUICE_TLS_CLIENT_NAMES", "", "with -tls-client-ca: client certificates must name one of these identities, comma-separated")
	f.String(&c.RedisCA, "redis-ca", "SLUICE_REDIS_CA", "", "PEM CA bundle of the Redis servers' certificates (rediss:// URLs)")
	f.String(&c.RedisCert, "redis-cert", "SLUICE_REDIS_CERT", "", "PEM client certificate for Redis (rediss:// URLs)")
	f.String(&c.RedisKey, "redis-key", "SLUICE_REDIS_KEY", "", "PEM private key of -redis-cert")
	f.String(&c.NATSCA, "nats-ca", "SLUICE_NATS_CA", "", "PEM CA bundle of the NATS servers")
	f.String(&c.NATSCert, "nats-cert", "SLUICE_NATS_CERT", "", "PEM client certificate for NATS")
	f.String(&c.NATSKey, "nats-key", "SLUICE_NATS_KEY", "", "PEM private key of -nats-cert")
	f.String(&c.NATSCreds, "nats-creds", "SLUICE_NATS_CREDS", "", "NATS user credentials file (JWT and NKey seed, as nsc writes it)")
	f.String(&c.NATSNKey, "nats-nkey", "SLUICE_NATS_NKEY", "", "NATS NKey seed file (an SU... seed)")
	f.String(&c.SinkCA, "sink-ca", "SLUICE_SINK_CA", "", "PEM CA bundle trusted for https:// sinks")
	f.List(&c.SignKeys, "sign-keys", "SLUICE_SIGN_KEYS", "", "HMAC key files, comma-separated: each signs HTTP deliveries (two during a key rotation)")
	f.String(&c.SignScheme, "sign-scheme", "SLUICE_SIGN_SCHEME", string(sign.SchemeSluice), "signature headers of HTTP deliveries: sluice (Sluice-Signature) or standard-webhooks (webhook-id, webhook-timestamp, webhook-signature)")
	f.BoolAction(&c.Version, "version", "print the version and exit")
	return f
}

// DrainerFlags lists the drainer's flags (not the -version action) with their
// environment variables and defaults.
func DrainerFlags() []Flag {
	var c DrainerConfig
	return drainerFlags(&c, func(string) string { return "" }, io.Discard).Flags()
}

// ParseDrainerFlags reads args (without the program name) and the environment (getenv;
// nil = os.Getenv) into a validated DrainerConfig. Errors name the flag and the value;
// they match ErrUsage.
func ParseDrainerFlags(args []string, getenv func(string) string, stderr io.Writer) (DrainerConfig, error) {
	var c DrainerConfig
	if err := drainerFlags(&c, getenv, stderr).Parse(args); err != nil {
		return c, UsageError(err)
	}
	if c.Version {
		return c, nil
	}
	return c, UsageError(c.Validate())
}

// Validate checks the config; an error names the flag and its bad value.
func (c *DrainerConfig) Validate() error {
	switch {
	case len(c.Rules) == 0:
		return fmt.Errorf("-rules is required (a rules file or directory; see deploy/examples)")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("-tls-cert and -tls-key: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return fmt.Errorf("-tls-client-ca: needs -tls-cert and -tls-key")
	case (c.NATSCert == "") != (c.NATSKey == ""):
		return fmt.Errorf("-nats-cert and -nats-key: give both or neither")
	case c.NATSCreds != "" && c.NATSNKey != "":
		return errNATSCredsAndNKey
	case len(c.TLSClientNames) > 0 && c.TLSClientCA == "":
		return fmt.Errorf("-tls-client-names: needs -tls-client-ca (names are read from verified client certificates)")
	case c.Workers < 1:
		return fmt.Errorf("-workers: want a positive number, got %d", c.Workers)
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("-replicas: want 1 or 3, got %d", c.Replicas)
	case c.Lease < 500*time.Millisecond:
		return fmt.Errorf("-lease: want a duration of at least 500ms, got %s", c.Lease)
	case c.LeaseRenew < 0 || c.LeaseRenew > c.Lease/2:
		return fmt.Errorf("-lease-renew: want 0s (lease/3) or a positive duration of at most -lease/2 (%s), got %s", c.Lease/2, c.LeaseRenew)
	case c.Engine != drain.EngineClaim && c.Engine != drain.EngineOwn:
		return fmt.Errorf("-engine: want claim or own, got %q", c.Engine)
	case c.OwnPartitions < 1 || c.OwnPartitions > 256:
		return fmt.Errorf("-own-partitions: want a number in [1, 256], got %d", c.OwnPartitions)
	case c.OwnLease < 300*time.Millisecond:
		return fmt.Errorf("-own-lease: want a duration of at least 300ms, got %s", c.OwnLease)
	case c.RepairEvery <= 0:
		return fmt.Errorf("-repair-every: want a positive duration, got %s", c.RepairEvery)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout: want a positive duration, got %s", c.ShutdownTimeout)
	case c.RulesPoll <= 0:
		return fmt.Errorf("-rules-poll: want a positive duration, got %s", c.RulesPoll)
	case c.StatusKeep < 0:
		return fmt.Errorf("-status-keep: want 0s (off) or a positive duration, got %s", c.StatusKeep)
	case c.StatusKeepMax <= 0:
		return fmt.Errorf("-status-keep-max: want a positive number of records, got %d", c.StatusKeepMax)
	case c.ReadmitMaxBackoff <= 0:
		return fmt.Errorf("-readmit-max-backoff: want a positive duration, got %s", c.ReadmitMaxBackoff)
	}
	if err := CheckStreamBytes(c.RetryMaxBytes, c.DeadMaxBytes); err != nil {
		return err
	}
	if _, err := sign.ParseScheme(c.SignScheme); err != nil {
		return fmt.Errorf("-sign-scheme: %w", err)
	}
	if err := CheckLog(c.LogFormat, c.LogLevel); err != nil {
		return err
	}
	if _, err := ParseRedisURL(c.RedisURL, 0); err != nil {
		return err
	}
	return CheckRedisTLS(c.RedisURL, c.RedisCA, c.RedisCert, c.RedisKey)
}

// Drainer is the drainer process. The same Drainer runs in cmd/drainer and, whole, in tests.
type Drainer struct {
	Config DrainerConfig
	Logger *slog.Logger // default: built from the config, on stderr

	// Set by Run.
	Addr      net.Addr // the HTTP listener's address (useful with -http :0)
	DebugAddr net.Addr // the pprof listener's; nil without -debug-addr
	Stack     *Stack
	Process   *Draining // the drain loop and the re-admitter

	closers []func()
	httpSrv *http.Server
	once    sync.Once
}

// Run connects to NATS and Redis, starts draining and serves /metrics, /healthz and
// /readyz. It returns once everything runs; stop it with Close (a soft stop). ctx only
// bounds the start: cancelling it later does not stop the drainer.
func (m *Drainer) Run(ctx context.Context) (err error) {
	c := m.Config
	if m.Logger == nil {
		m.Logger = NewLogger(c.LogFormat, c.LogLevel, os.Stderr)
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
		if tlsSrv, err = tlsx.NewServer(tlsx.ServerFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA, ClientNames: c.TLSClientNames, Logger: log}); err != nil {
			return fmt.Errorf("drainer: %w", err)
		}
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

	st, err := Open(ctx, StackConfig{
		Name: "drainer", NATSURL: c.NATSURL, RedisURL: c.RedisURL, Replicas: c.Replicas,
		NATSCA: c.NATSCA, NATSCert: c.NATSCert, NATSKey: c.NATSKey, NATSCreds: c.NATSCreds, NATSNKey: c.NATSNKey,
		RedisTLS:   RedisTLS{CA: c.RedisCA, Cert: c.RedisCert, Key: c.RedisKey},
		StatusKeep: c.StatusKeep, StatusKeepMax: c.StatusKeepMax,
		RetryMaxBytes: c.RetryMaxBytes, DeadMaxBytes: c.DeadMaxBytes, DeadDropOldest: c.DeadDropOldest, Registry: reg,
		Rules: watcher.Current, Logger: log, RedisPoolSize: 2*c.Workers + 16, Engine: c.Engine,
	})
	if err != nil {
		return err
	}
	m.Stack = st
	m.closers = append(m.closers, st.Close)
	proc, err := StartDraining(bg, DrainDeps{
		Stack: st, Rules: watcher.Current, Logger: log, Registerer: reg,
		SinkTLS: sinkTLS, Signer: signer, SignScheme: sign.Scheme(c.SignScheme),
		Drain: drain.Config{Workers: c.Workers, StopTimeout: c.ShutdownTimeout, Lease: c.Lease, LeaseRenew: c.LeaseRenew,
			Engine: c.Engine, OwnPartitions: c.OwnPartitions, OwnLease: c.OwnLease, RepairEvery: c.RepairEvery},
		Readmit: retry.ReadmitterConfig{MaxBackoff: c.ReadmitMaxBackoff},
	})
	if err != nil {
		return err
	}
	m.Process = proc

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Ready(ctx); err != nil {
			log.Warn("drainer: not ready", "err", err)
			http.Error(w, httpx.PublicReadyError(err), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	ln, err := Listen("http", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("drainer: %w", err)
	}
	m.Addr = ln.Addr()
	m.httpSrv = NewHTTPServer(mux, log, 0)
	Serve(m.httpSrv, ln, tlsSrv, log, "drainer")
	if c.DebugAddr != "" {
		addr, stop, err := ServeDebug(c.DebugAddr, log, "drainer")
		if err != nil {
			return fmt.Errorf("drainer: %w", err)
		}
		m.DebugAddr = addr
		m.closers = append(m.closers, stop)
	}
	log.Info("drainer: running", "addr", m.Addr.String(), "tls", tlsSrv != nil, "nats", c.NATSURL,
		"queue_rules", len(watcher.Current().QueueRules()), "workers", c.Workers, "owner", proc.Drainer.Owner(), "version", Version())
	return nil
}

// Close stops the process softly: no more claims, in-flight deliveries finish (within
// -shutdown-timeout, then they are cancelled and stay queued), then the HTTP server and
// the connections. Safe to call twice.
func (m *Drainer) Close() {
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
