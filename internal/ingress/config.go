package ingress

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/app"
)

// Config is everything the ingress process is told from outside. Flags have environment
// equivalents (flag wins); every field documents its default.
type Config struct {
	Rules      []string // -rules / SLUICE_RULES: rules files or directories, comma-separated. Required unless -check-config.
	HTTPAddr   string   // -http / SLUICE_HTTP_ADDR: listen address. Default ":8080".
	NATSURL    string   // -nats / SLUICE_NATS_URL: NATS server URL(s), comma-separated. Default "nats://127.0.0.1:4222"; ignored with -dev.
	RedisURL   string   // -redis / SLUICE_REDIS_URL: redis://, rediss://, unix://, Cluster or Sentinel URL (app.ParseRedisURL). Default "redis://127.0.0.1:6379"; ignored with -dev.
	AdminToken string   // -admin-token / SLUICE_ADMIN_TOKEN: bearer token of /v1/admin; empty disables the admin API (401).
	// GRPCAddr is where the envoy rate limit service (RLS v3 gRPC), gRPC health and
	// reflection listen. -grpc / SLUICE_GRPC_ADDR; default ":8081" (envoyproxy/ratelimit's
	// port); empty disables.
	GRPCAddr string
	// GRPCResponseHeaders adds the rate-limit headers to every gRPC answer (Envoy passes
	// them to the client), not only for rules with response_headers: true.
	// -grpc-response-headers / SLUICE_GRPC_RESPONSE_HEADERS; default false, as envoy's
	// LIMIT_RESPONSE_HEADERS_ENABLED.
	GRPCResponseHeaders bool
	// DebugAddr serves Go's pprof profiles (/debug/pprof/) on a listener of its own, for
	// profiling a live process; keep it off public networks. -debug-addr /
	// SLUICE_DEBUG_ADDR; default empty (off). envoyproxy/ratelimit's debug port is 6070.
	DebugAddr string

	Dev         bool   // -dev: embedded NATS, in-process drainer, in-process Redis-compatible store, demo sink.
	DataDir     string // -data / SLUICE_DATA: JetStream store of -dev. Default "./data".
	DevNATSAddr string // -dev-nats-addr: where the embedded NATS server listens. Default "127.0.0.1:4222" (":0" = any free port).
	DevSinkAddr string // -dev-sink-addr: where the demo sink listens. Default "127.0.0.1:8090".

	// CheckConfig validates rules files or directories, comma-separated as -rules, and
	// exits. -check-config; default empty (run the ingress).
	CheckConfig []string

	// Envoy parity knobs (README "Envoy / Istio"). Each defaults to envoyproxy/ratelimit's
	// default (off).
	//
	// MergeDomainConfig lets several rules documents define one domain, merged (envoy's
	// MERGE_DOMAIN_CONFIG). -merge-domain-config / SLUICE_MERGE_DOMAIN_CONFIG; default false.
	MergeDomainConfig bool
	// ShadowMode answers every check OK overall, whatever its descriptors say (envoy's
	// SHADOW_MODE); descriptor statuses, counting and metrics are unchanged.
	// -shadow-mode / SLUICE_SHADOW_MODE; default false.
	ShadowMode bool
	// QuotaMode puts every descriptor in quota mode (envoy's QUOTA_MODE; see a rule's
	// quota_mode). -quota-mode / SLUICE_QUOTA_MODE; default false.
	QuotaMode bool
	// ResponseDynamicMetadata adds envoy's dynamic_metadata to answers: domain,
	// descriptors, hits_addend and the merged metadata of the passing descriptors' rules
	// (envoy's RESPONSE_DYNAMIC_METADATA). -response-dynamic-metadata /
	// SLUICE_RESPONSE_DYNAMIC_METADATA; default false.
	ResponseDynamicMetadata bool
	// LocalCacheBytes bounds a local cache of over-limit keys (envoy's
	// LOCAL_CACHE_SIZE_IN_BYTES): a key found over its fixed window is answered
	// OVER_LIMIT without the store until the window ends. -local-cache-bytes /
	// SLUICE_LOCAL_CACHE_SIZE_IN_BYTES; default 0 (off).
	LocalCacheBytes int64
	// DetailedMetricValues bounds sluice_checks_detailed_total (rules with
	// detailed_metric): at most this many distinct descriptor values per rule get their
	// own series, the rest count under "_other". -detailed-metric-values /
	// SLUICE_DETAILED_METRIC_VALUES; default 100.
	DetailedMetricValues int

	// Drain runs a drainer (and re-admitter) inside this process. -drain; default true with
	// -dev, false otherwise (production runs separate drainer processes).
	Drain bool
	// DrainWorkers is the in-process drainer's concurrent deliveries per queue rule.
	// -drain-workers; default 32.
	DrainWorkers int
	// ReadmitMaxBackoff caps the backoff between two re-admission attempts of a parked
	// message that still finds no room. -readmit-max-backoff; default 5m.
	ReadmitMaxBackoff time.Duration

	MaxBody         int64         // -max-body / SLUICE_MAX_BODY: largest request body in bytes (a whole batch too). Default 1 MiB.
	MaxBatch        int           // -max-batch / SLUICE_MAX_BATCH: most messages in one batch submission. Default 500.
	MaxDelay        time.Duration // -max-delay / SLUICE_MAX_DELAY: how far ahead deliver_at / delay may be. Default 720h (30 days).
	Replicas        int           // -replicas / SLUICE_REPLICAS: replicas of queue streams (1 or 3). Default 1.
	ShutdownTimeout time.Duration // -shutdown-timeout / SLUICE_SHUTDOWN_TIMEOUT: drain time on SIGTERM. Default 10s.
	LogFormat       string        // -log-format / SLUICE_LOG_FORMAT: json or text. Default json (text with -dev).
	LogLevel        string        // -log-level / SLUICE_LOG_LEVEL: debug, info, warn, error. Default info.
	RulesPoll       time.Duration // -rules-poll / SLUICE_RULES_POLL: how often rules files are checked for changes. Default 1s.

	// ReadHeaderTimeout is how long a client has to send a request's headers once its
	// connection is open (or idle between requests): a client that trickles them (slowloris)
	// is disconnected then. -read-header-timeout / SLUICE_READ_HEADER_TIMEOUT; default 5s.
	// The other limits of the HTTP listener are fixed (README "Hostile input"): a request's
	// headers at most MaxHeaderBytes (64 KiB, else 431), the whole request read within 30s,
	// an answer written within 30s, an idle keep-alive connection closed after 120s.
	ReadHeaderTimeout time.Duration

	// IdempotencyTTL is how long an idempotency key maps to its first message.
	// -idempotency-ttl / SLUICE_IDEMPOTENCY_TTL; default 24h.
	IdempotencyTTL time.Duration
	// StatusKeep keeps a record of each delivered message this long, so GET
	// /v1/messages/{id} answers "delivered" instead of "no longer tracked" (a JetStream
	// stream bounded by age and StatusKeepMax; nothing in Redis). Set the same on drainers:
	// they write the records. -status-keep / SLUICE_STATUS_KEEP; default 0 (off), 1h with -dev.
	StatusKeep time.Duration
	// StatusKeepMax bounds the delivered records kept (oldest dropped first).
	// -status-keep-max / SLUICE_STATUS_KEEP_MAX; default 1000000.
	StatusKeepMax int64

	// Security (README "Security").
	//
	// TLSCert and TLSKey serve the HTTP and gRPC listeners over TLS (1.2 or newer),
	// reloaded without a restart when the files change. -tls-cert / SLUICE_TLS_CERT,
	// -tls-key / SLUICE_TLS_KEY; default empty (plain text).
	TLSCert, TLSKey string
	// TLSClientCA requires client certificates signed by these CAs (mutual TLS) on both
	// listeners. -tls-client-ca / SLUICE_TLS_CLIENT_CA; default empty (no client certificate).
	TLSClientCA string
	// NATSCA, NATSCert and NATSKey: the CA bundle that signs the NATS servers'
	// certificates and a client certificate for NATS (tls:// URLs). -nats-ca /
	// SLUICE_NATS_CA, -nats-cert / SLUICE_NATS_CERT, -nats-key / SLUICE_NATS_KEY; default
	// empty (system roots, no client certificate).
	NATSCA, NATSCert, NATSKey string
	// SinkCA is the CA bundle trusted for https:// sinks of the in-process drainer
	// (instead of the system roots). -sink-ca / SLUICE_SINK_CA; default empty.
	SinkCA string
	// SignKeys are files holding HMAC keys: deliveries of the in-process drainer to HTTP
	// sinks are signed with the first (Sluice-Signature). -sign-keys / SLUICE_SIGN_KEYS,
	// comma-separated; default empty (unsigned).
	SignKeys []string
	// AdminTokensFile holds named, scoped admin tokens ("name scope token" lines, scope
	// read or operate), re-read when it changes. -admin-tokens / SLUICE_ADMIN_TOKENS;
	// default empty. -admin-token remains, with scope operate.
	AdminTokensFile string
	// AdminTokenFile reads the -admin-token value from a file (a mounted secret).
	// -admin-token-file / SLUICE_ADMIN_TOKEN_FILE; default empty.
	AdminTokenFile string
	// SubmitTokensFile makes POST /v1/messages require a bearer token of this file
	// ("name submit token" or "name submit:DOMAIN token" lines). -submit-tokens /
	// SLUICE_SUBMIT_TOKENS; default empty (submit is open).
	SubmitTokensFile string
	// AuditKeep is how long operator changes are kept in the SLUICE_AUDIT stream, and
	// AuditMax how many at most. -audit-keep / SLUICE_AUDIT_KEEP, default 2160h (90 days);
	// -audit-max / SLUICE_AUDIT_MAX, default 100000.
	AuditKeep time.Duration
	AuditMax  int64
}

// ParseFlags reads args (without the program name) and the environment into a Config.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c Config
	fs := flag.NewFlagSet("ingress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rules := fs.String("rules", env("SLUICE_RULES", ""), "rules files or directories, comma-separated (env SLUICE_RULES)")
	fs.StringVar(&c.HTTPAddr, "http", env("SLUICE_HTTP_ADDR", ":8080"), "HTTP listen address (env SLUICE_HTTP_ADDR)")
	fs.StringVar(&c.NATSURL, "nats", env("SLUICE_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL(s) (env SLUICE_NATS_URL)")
	fs.StringVar(&c.RedisURL, "redis", env("SLUICE_REDIS_URL", "redis://127.0.0.1:6379"), "Redis URL: redis://, rediss://, unix://, a cluster (redis://h1:p?addr=h2:p&addr=h3:p) or Sentinel (redis+sentinel://s1:26379?master_name=M&addr=s2:26379) (env SLUICE_REDIS_URL)")
	fs.StringVar(&c.GRPCAddr, "grpc", env("SLUICE_GRPC_ADDR", ":8081"), "envoy rate limit service (gRPC) listen address; empty disables (env SLUICE_GRPC_ADDR)")
	fs.StringVar(&c.DebugAddr, "debug-addr", env("SLUICE_DEBUG_ADDR", ""), "pprof listen address, e.g. 127.0.0.1:6070; empty disables (env SLUICE_DEBUG_ADDR)")
	grpcHeaders := fs.String("grpc-response-headers", env("SLUICE_GRPC_RESPONSE_HEADERS", "false"), "add rate-limit headers to every gRPC answer, not only for rules with response_headers (env SLUICE_GRPC_RESPONSE_HEADERS)")
	fs.StringVar(&c.AdminToken, "admin-token", env("SLUICE_ADMIN_TOKEN", ""), "bearer token of the admin API (env SLUICE_ADMIN_TOKEN)")
	fs.BoolVar(&c.Dev, "dev", false, "one process: embedded NATS, in-process drainer and store, demo sink")
	fs.StringVar(&c.DataDir, "data", env("SLUICE_DATA", "./data"), "JetStream store directory of -dev (env SLUICE_DATA)")
	fs.StringVar(&c.DevNATSAddr, "dev-nats-addr", "127.0.0.1:4222", "listen address of the embedded NATS server of -dev (port 0: any)")
	fs.StringVar(&c.DevSinkAddr, "dev-sink-addr", "127.0.0.1:8090", "listen address of the demo sink of -dev")
	checkConfig := fs.String("check-config", "", "validate these rules files or directories (comma-separated, as -rules) and exit")
	// The envoy parity knobs are typed flags (-shadow-mode alone means true) whose
	// defaults come from their SLUICE_* variables.
	var envErr error
	envBool := func(name string) bool {
		v := getenv(name)
		if v == "" {
			return false
		}
		on, err := strconv.ParseBool(v)
		if err != nil && envErr == nil {
			envErr = fmt.Errorf("%s: want true or false, got %q", name, v)
		}
		return on
	}
	envInt := func(name string, def int64) int64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && envErr == nil {
			envErr = fmt.Errorf("%s: want a whole number, got %q", name, v)
		}
		return n
	}
	fs.BoolVar(&c.MergeDomainConfig, "merge-domain-config", envBool("SLUICE_MERGE_DOMAIN_CONFIG"), "merge rules documents of one domain instead of refusing them, as envoy's MERGE_DOMAIN_CONFIG (env SLUICE_MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", envBool("SLUICE_SHADOW_MODE"), "answer every check OK overall, as envoy's SHADOW_MODE (env SLUICE_SHADOW_MODE)")
	fs.BoolVar(&c.QuotaMode, "quota-mode", envBool("SLUICE_QUOTA_MODE"), "every descriptor in quota mode, as envoy's QUOTA_MODE (env SLUICE_QUOTA_MODE)")
	fs.BoolVar(&c.ResponseDynamicMetadata, "response-dynamic-metadata", envBool("SLUICE_RESPONSE_DYNAMIC_METADATA"), "add envoy's dynamic_metadata to answers, as envoy's RESPONSE_DYNAMIC_METADATA (env SLUICE_RESPONSE_DYNAMIC_METADATA)")
	fs.Int64Var(&c.LocalCacheBytes, "local-cache-bytes", envInt("SLUICE_LOCAL_CACHE_SIZE_IN_BYTES", 0), "bytes of the local over-limit cache, as envoy's LOCAL_CACHE_SIZE_IN_BYTES; 0 disables (env SLUICE_LOCAL_CACHE_SIZE_IN_BYTES)")
	var detailed int64
	fs.Int64Var(&detailed, "detailed-metric-values", envInt("SLUICE_DETAILED_METRIC_VALUES", DefaultDetailedMetricValues), "distinct values per detailed_metric rule in sluice_checks_detailed_total, the rest counted as _other (env SLUICE_DETAILED_METRIC_VALUES)")
	drainFlag := fs.String("drain", "", "run a drainer in this process: true or false (default true with -dev)")
	fs.IntVar(&c.DrainWorkers, "drain-workers", 32, "concurrent deliveries of the in-process drainer, per queue rule")
	fs.DurationVar(&c.ReadmitMaxBackoff, "readmit-max-backoff", 5*time.Minute, "longest wait between re-admission attempts of a parked message")
	maxBody := fs.String("max-body", env("SLUICE_MAX_BODY", "1048576"), "largest request body in bytes (env SLUICE_MAX_BODY)")
	replicas := fs.String("replicas", env("SLUICE_REPLICAS", "1"), "replicas of queue streams, 1 or 3 (env SLUICE_REPLICAS)")
	shutdown := fs.String("shutdown-timeout", env("SLUICE_SHUTDOWN_TIMEOUT", "10s"), "graceful shutdown time (env SLUICE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.LogFormat, "log-format", env("SLUICE_LOG_FORMAT", ""), "json or text; default json, text with -dev (env SLUICE_LOG_FORMAT)")
	fs.StringVar(&c.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	poll := fs.String("rules-poll", env("SLUICE_RULES_POLL", "1s"), "how often rules files are checked for changes (env SLUICE_RULES_POLL)")
	envDur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if (err != nil || d < 0) && envErr == nil {
			envErr = fmt.Errorf("%s: want a duration such as 90s or 24h, got %q", name, v)
		}
		return d
	}
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", envDur("SLUICE_READ_HEADER_TIMEOUT", DefaultReadHeaderTimeout), "how long a client has to send a request's headers; slower ones are disconnected (env SLUICE_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", envDur("SLUICE_IDEMPOTENCY_TTL", 24*time.Hour), "how long an idempotency key maps to its first message (env SLUICE_IDEMPOTENCY_TTL)")
	fs.DurationVar(&c.StatusKeep, "status-keep", envDur("SLUICE_STATUS_KEEP", 0), "keep a record of each delivered message this long; 0 = off (default off, 1h with -dev) (env SLUICE_STATUS_KEEP)")
	fs.DurationVar(&c.MaxDelay, "max-delay", envDur("SLUICE_MAX_DELAY", DefaultMaxDelay), "how far ahead a submission's deliver_at or delay may be (env SLUICE_MAX_DELAY)")
	fs.IntVar(&c.MaxBatch, "max-batch", int(envInt("SLUICE_MAX_BATCH", DefaultMaxBatch)), "most messages in one batch submission; more is 413 (env SLUICE_MAX_BATCH)")
	fs.Int64Var(&c.StatusKeepMax, "status-keep-max", envInt("SLUICE_STATUS_KEEP_MAX", 1_000_000), "most delivered records kept, oldest dropped first (env SLUICE_STATUS_KEEP_MAX)")
	fs.StringVar(&c.TLSCert, "tls-cert", env("SLUICE_TLS_CERT", ""), "PEM certificate (chain) of the HTTP and gRPC listeners; reloaded when it changes (env SLUICE_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", env("SLUICE_TLS_KEY", ""), "PEM private key of -tls-cert (env SLUICE_TLS_KEY)")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", env("SLUICE_TLS_CLIENT_CA", ""), "PEM CA bundle: require client certificates it signed (mutual TLS) (env SLUICE_TLS_CLIENT_CA)")
	fs.StringVar(&c.NATSCA, "nats-ca", env("SLUICE_NATS_CA", ""), "PEM CA bundle of the NATS servers' certificates (env SLUICE_NATS_CA)")
	fs.StringVar(&c.NATSCert, "nats-cert", env("SLUICE_NATS_CERT", ""), "PEM client certificate for NATS (env SLUICE_NATS_CERT)")
	fs.StringVar(&c.NATSKey, "nats-key", env("SLUICE_NATS_KEY", ""), "PEM private key of -nats-cert (env SLUICE_NATS_KEY)")
	fs.StringVar(&c.SinkCA, "sink-ca", env("SLUICE_SINK_CA", ""), "PEM CA bundle trusted for https:// sinks of the in-process drainer (env SLUICE_SINK_CA)")
	signKeys := fs.String("sign-keys", env("SLUICE_SIGN_KEYS", ""), "files of HMAC keys, comma-separated: HTTP deliveries are signed with the first (env SLUICE_SIGN_KEYS)")
	fs.StringVar(&c.AdminTokensFile, "admin-tokens", env("SLUICE_ADMIN_TOKENS", ""), "file of scoped admin tokens, 'name scope token' lines (env SLUICE_ADMIN_TOKENS)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", env("SLUICE_ADMIN_TOKEN_FILE", ""), "file holding the -admin-token value (env SLUICE_ADMIN_TOKEN_FILE)")
	fs.StringVar(&c.SubmitTokensFile, "submit-tokens", env("SLUICE_SUBMIT_TOKENS", ""), "file of submit tokens: POST /v1/messages then needs one (env SLUICE_SUBMIT_TOKENS)")
	fs.DurationVar(&c.AuditKeep, "audit-keep", envDur("SLUICE_AUDIT_KEEP", 90*24*time.Hour), "how long operator changes are kept in SLUICE_AUDIT (env SLUICE_AUDIT_KEEP)")
	fs.Int64Var(&c.AuditMax, "audit-max", envInt("SLUICE_AUDIT_MAX", 100_000), "most operator changes kept in SLUICE_AUDIT, oldest dropped first (env SLUICE_AUDIT_MAX)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, p := range strings.Split(*signKeys, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.SignKeys = append(c.SignKeys, p)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, errors.New("-tls-cert and -tls-key: give both or neither")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return c, errors.New("-tls-client-ca: needs -tls-cert and -tls-key (client certificates are only asked for over TLS)")
	}
	if (c.NATSCert == "") != (c.NATSKey == "") {
		return c, errors.New("-nats-cert and -nats-key: give both or neither")
	}
	if c.AdminToken != "" && c.AdminTokenFile != "" {
		return c, errors.New("-admin-token-file: give it or -admin-token, not both")
	}
	if c.AuditKeep <= 0 {
		return c, fmt.Errorf("-audit-keep: want a positive duration, got %s", c.AuditKeep)
	}
	if c.AuditMax <= 0 {
		return c, fmt.Errorf("-audit-max: want a positive number of records, got %d", c.AuditMax)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, p := range strings.Split(*rules, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Rules = append(c.Rules, p)
		}
	}
	for _, p := range strings.Split(*checkConfig, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.CheckConfig = append(c.CheckConfig, p)
		}
	}
	if envErr != nil {
		return c, envErr
	}
	var err error
	if c.LocalCacheBytes < 0 {
		return c, fmt.Errorf("-local-cache-bytes: want 0 (off) or a positive number of bytes, got %d", c.LocalCacheBytes)
	}
	if detailed < 0 || detailed > 1<<20 {
		return c, fmt.Errorf("-detailed-metric-values: want 0 to %d, got %d", 1<<20, detailed)
	}
	c.DetailedMetricValues = int(detailed)
	keepSet := getenv("SLUICE_STATUS_KEEP") != ""
	fs.Visit(func(f *flag.Flag) { keepSet = keepSet || f.Name == "status-keep" })
	if c.Dev && !keepSet {
		c.StatusKeep = time.Hour // the dev stack answers "delivered" out of the box
	}
	if c.ReadHeaderTimeout <= 0 {
		return c, fmt.Errorf("-read-header-timeout: want a positive duration, got %s", c.ReadHeaderTimeout)
	}
	if c.IdempotencyTTL <= 0 {
		return c, fmt.Errorf("-idempotency-ttl: want a positive duration, got %s", c.IdempotencyTTL)
	}
	if c.MaxDelay <= 0 {
		return c, fmt.Errorf("-max-delay: want a positive duration, got %s", c.MaxDelay)
	}
	if c.MaxBatch <= 0 {
		return c, fmt.Errorf("-max-batch: want a positive number of messages, got %d", c.MaxBatch)
	}
	if c.StatusKeepMax <= 0 {
		return c, fmt.Errorf("-status-keep-max: want a positive number of records, got %d", c.StatusKeepMax)
	}
	if c.MaxBody, err = strconv.ParseInt(*maxBody, 10, 64); err != nil || c.MaxBody <= 0 {
		return c, fmt.Errorf("-max-body: want a positive number of bytes, got %q", *maxBody)
	}
	if c.Replicas, err = strconv.Atoi(*replicas); err != nil || (c.Replicas != 1 && c.Replicas != 3) {
		return c, fmt.Errorf("-replicas: want 1 or 3, got %q", *replicas)
	}
	if c.ShutdownTimeout, err = time.ParseDuration(*shutdown); err != nil || c.ShutdownTimeout <= 0 {
		return c, fmt.Errorf("-shutdown-timeout: want a positive duration, got %q", *shutdown)
	}
	if c.RulesPoll, err = time.ParseDuration(*poll); err != nil || c.RulesPoll <= 0 {
		return c, fmt.Errorf("-rules-poll: want a positive duration, got %q", *poll)
	}
	if c.GRPCResponseHeaders, err = strconv.ParseBool(*grpcHeaders); err != nil {
		return c, fmt.Errorf("-grpc-response-headers: want true or false, got %q", *grpcHeaders)
	}
	switch *drainFlag {
	case "":
		c.Drain = c.Dev
	case "true", "1":
		c.Drain = true
	case "false", "0":
		c.Drain = false
	default:
		return c, fmt.Errorf("-drain: want true or false, got %q", *drainFlag)
	}
	if c.LogFormat == "" {
		c.LogFormat = "json"
		if c.Dev {
			c.LogFormat = "text"
		}
	}
	if _, err := app.ParseRedisURL(c.RedisURL, 0); err != nil {
		return c, err
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return c, fmt.Errorf("-log-format: want json or text, got %q", c.LogFormat)
	}
	if len(c.CheckConfig) == 0 && len(c.Rules) == 0 {
		return c, errors.New("-rules is required (a rules file or directory; see deploy/examples)")
	}
	return c, nil
}
