package ingress

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-io/sluice/internal/decide"
	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/httpx"
	svc "github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/queue"
)

// Config is everything the ingress process is told from outside. Every field is a
// flag with a SLUICE_* environment variable (the flag wins); its default is written once,
// in declareFlags, and in the README's table (checked by a test).
type Config struct {
	Rules      []string // -rules: rules files or directories, comma-separated. Required unless -check-config.
	HTTPAddr   string   // -http: the API's listen address (also /metrics, /healthz, /readyz). Default ":8080".
	NATSURL    string   // -nats: NATS server URL(s), comma-separated. Default "nats://127.0.0.1:4222".
	RedisURL   string   // -redis: redis://, rediss://, unix://, Cluster or Sentinel URL (process.ParseRedisURL). Default "redis://127.0.0.1:6379".
	AdminToken string   // -admin-token: bearer token of /v1/admin; empty disables the admin API (401).
	// GRPCAddr is where the envoy rate limit service (RLS v3 gRPC), gRPC health and
	// reflection listen. -grpc; default ":8081" (envoyproxy/ratelimit's port); empty disables.
	GRPCAddr string
	// GRPCResponseHeaders adds the rate-limit headers to every gRPC answer, not only for
	// rules with response_headers: true. -grpc-response-headers; default false.
	GRPCResponseHeaders bool
	// GRPCReflection serves gRPC server reflection on -grpc (grpcurl can list and call
	// the services without their protos). -grpc-reflection; default false (`sluice dev`
	// turns it on): a production listener does not describe itself to strangers.
	GRPCReflection bool
	// OverrideMaxFactor and OverrideMaxWindow bound a check's limit override wherever its
	// rule's limit_override does not (docs/rules.md "limit_override").
	// -override-max-factor, default 10; -override-max-window, default 24h.
	OverrideMaxFactor int64
	OverrideMaxWindow time.Duration
	// DebugAddr serves Go's pprof profiles (/debug/pprof/) on a listener of its own; keep
	// it off public networks. -debug-addr; default empty (off).
	DebugAddr string

	// CheckConfig validates rules files or directories, comma-separated as -rules, and
	// exits. -check-config (an action: no environment variable); default empty.
	CheckConfig []string
	// Version prints the build's version and exits. -version (an action).
	Version bool

	// Envoy parity knobs (README "Envoy / Istio"), each off by default as in
	// envoyproxy/ratelimit: -merge-domain-config, -shadow-mode, -quota-mode,
	// -response-dynamic-metadata, -local-cache-bytes (0 = off), and
	// -detailed-metric-values (default 100).
	MergeDomainConfig       bool
	ShadowMode              bool
	QuotaMode               bool
	ResponseDynamicMetadata bool
	LocalCacheBytes         int64
	DetailedMetricValues    int

	// Engine is the drainers' engine, as their -engine (every drainer and ingress must run the
	// same): with claim, every admission counts its key's depth and marks it due in Redis,
	// which is how claim drainers learn of work; with own (drainers subscribe to the rules'
	// subjects) admission writes nothing to Redis. The in-process drainer (-drain) runs it
	// too. -engine; default own.
	Engine string

	// Drain runs a drainer (and re-admitter) inside this process. -drain; default false
	// (production runs separate drainer processes; `sluice dev` turns it on).
	Drain bool
	// DrainWorkers is the in-process drainer's concurrent deliveries per queue rule.
	// -drain-workers; default 32.
	DrainWorkers int
	// ReadmitMaxBackoff caps the wait between two re-admission attempts of a parked
	// message that still finds no room. -readmit-max-backoff; default 5m.
	ReadmitMaxBackoff time.Duration

	MaxBody         int64         // -max-body: largest request body (a whole batch too), a byte size. Default 1MiB.
	MaxBatch        int           // -max-batch: most messages in one batch submission. Default 500.
	MaxDelay        time.Duration // -max-delay: how far ahead deliver_at / delay may be. Default 720h (30 days).
	Replicas        int           // -replicas: replicas of the streams (1 or 3). Default 1.
	ShutdownTimeout time.Duration // -shutdown-timeout: time to finish in-flight requests on SIGTERM. Default 10s.
	LogFormat       string        // -log-format: json or text. Default json.
	LogLevel        string        // -log-level: debug, info, warn, error. Default info.
	RulesPoll       time.Duration // -rules-poll: how often rules files are checked for changes. Default 1s.

	// ReadHeaderTimeout is how long a client has to send a request's headers
	// (slowloris). -read-header-timeout; default 5s. The listener's other limits are fixed
	// (README "Hostile input").
	ReadHeaderTimeout time.Duration
	// IdempotencyTTL is how long an idempotency key maps to its first message.
	// -idempotency-ttl; default 24h.
	IdempotencyTTL time.Duration
	// LegacyIdempotencyKeys claims idempotency keys in v0.3's Redis layout (and writes this
	// version's too), for a rolling upgrade from v0.3. -legacy-idempotency-keys; default false.
	LegacyIdempotencyKeys bool
	// StatusKeep keeps a record of each delivered message this long, so GET
	// /v1/messages/{id} answers "delivered" (set the same on drainers: they write them).
	// -status-keep; default 0s (off). StatusKeepMax bounds them: -status-keep-max,
	// default 1000000.
	StatusKeep    time.Duration
	StatusKeepMax int64
	// RetryMaxBytes and DeadMaxBytes bound the JetStream storage of the retry and
	// dead-letter streams (file storage is reserved up front: a NATS whose store is
	// smaller refuses them). -retry-max-bytes, -dead-max-bytes; default 1GiB each.
	RetryMaxBytes, DeadMaxBytes int64
	// RetryRuleShare is the percentage of the retry stream one rule's messages may take
	// (-retry-rule-share, default 25; 0 in a config built in code: the same).
	RetryRuleShare int
	// DeadDropOldest: a full dead-letter stream deletes its oldest dead letters (counted)
	// instead of refusing new ones. -dead-drop-oldest; default false.
	DeadDropOldest bool
	// QueueMaxBytes bounds each queue rule's stream unless the rule sets queue.max_bytes.
	// -queue-max-bytes; default 1GiB; 0: no limit of the stream's own (only the store's).
	QueueMaxBytes int64
	// PublishWait is how long a submit waits for its stream's new leader before a 503.
	// -publish-wait; default 10s.
	PublishWait time.Duration

	// Security (README "Security"): -tls-cert, -tls-key, -tls-client-ca for the
	// listeners; -nats-ca, -nats-cert, -nats-key for NATS; -sink-ca and -sign-keys for the
	// in-process drainer's deliveries; -admin-tokens, -admin-token-file, -submit-tokens.
	// All default empty (off).
	TLSCert, TLSKey, TLSClientCA string
	// TLSClientNames: with -tls-client-ca, a client certificate must also name one of
	// these identities (-tls-client-names; default empty: any the CA signed).
	TLSClientNames []string
	// CheckClientNames: client certificate identities that may use the check API without
	// a check token once -submit-tokens is set (-check-client-names; default empty).
	CheckClientNames []string
	// RedisCA, RedisCert, RedisKey: TLS to Redis (rediss:// URLs) trusting this CA
	// bundle and presenting this client certificate (-redis-ca, -redis-cert, -redis-key;
	// default empty: system roots, no client certificate).
	RedisCA, RedisCert, RedisKey string
	NATSCA, NATSCert, NATSKey    string
	// NATSCreds (-nats-creds) is a NATS user credentials file (JWT and NKey seed);
	// NATSNKey (-nats-nkey) an NKey seed file. Either keeps the NATS secret out of -nats,
	// the environment and the process list. Default empty (none).
	NATSCreds, NATSNKey string
	SinkCA              string
	SignKeys            []string
	SignScheme          string // -sign-scheme: sluice (default) or standard-webhooks
	AdminTokensFile     string
	AdminTokenFile      string
	SubmitTokensFile    string
	// AuditKeep is how long operator changes are kept in the SLUICE_AUDIT stream, and
	// AuditMax how many at most. -audit-keep, default 2160h (90 days); -audit-max,
	// default 100000.
	AuditKeep time.Duration
	AuditMax  int64
}

// declareFlags declares the ingress's flags into c.
func declareFlags(c *Config, getenv func(string) string, stderr io.Writer) *process.FlagSet {
	f := process.NewFlagSet("ingress", getenv, stderr)
	f.List(&c.Rules, "rules", "SLUICE_RULES", "", "rules files or directories, comma-separated (required)")
	f.String(&c.HTTPAddr, "http", "SLUICE_HTTP_ADDR", ":8080", "HTTP API listen address, also /metrics, /healthz, /readyz")
	f.String(&c.GRPCAddr, "grpc", "SLUICE_GRPC_ADDR", ":8081", "envoy rate limit service (gRPC) listen address; empty disables")
	f.String(&c.DebugAddr, "debug-addr", "SLUICE_DEBUG_ADDR", "", "pprof listen address, e.g. 127.0.0.1:6070; empty disables")
	f.String(&c.NATSURL, "nats", "SLUICE_NATS_URL", "nats://127.0.0.1:4222", "NATS URL(s), comma-separated")
	f.String(&c.RedisURL, "redis", "SLUICE_REDIS_URL", "redis://127.0.0.1:6379", "Redis URL: redis://, rediss://, unix://, a cluster (redis://h1:p?addr=h2:p) or Sentinel (redis+sentinel://s1:26379?master_name=M)")
	f.String(&c.AdminToken, "admin-token", "SLUICE_ADMIN_TOKEN", "", "bearer token of the admin API (scope operate); empty: no static token")
	f.String(&c.AdminTokenFile, "admin-token-file", "SLUICE_ADMIN_TOKEN_FILE", "", "file holding the -admin-token value")
	f.String(&c.AdminTokensFile, "admin-tokens", "SLUICE_ADMIN_TOKENS", "", "file of scoped admin tokens, 'name scope token' lines")
	f.String(&c.SubmitTokensFile, "submit-tokens", "SLUICE_SUBMIT_TOKENS", "", "file of submit tokens: POST /v1/messages then needs one")
	f.String(&c.Engine, "engine", "SLUICE_ENGINE", drain.EngineOwn, "the drainers' engine, as their -engine: claim (admission also counts depth and marks keys due in Redis) or own (admission is the publish alone)")
	f.Bool(&c.Drain, "drain", "SLUICE_DRAIN", false, "run a drainer in this process too")
	f.Int(&c.DrainWorkers, "drain-workers", "SLUICE_DRAIN_WORKERS", 32, "deliveries in flight at once per queue rule of the in-process drainer")
	f.Duration(&c.ReadmitMaxBackoff, "readmit-max-backoff", "SLUICE_READMIT_MAX_BACKOFF", 5*time.Minute, "longest wait between re-admission attempts of a parked message (with -drain)")
	f.Bytes(&c.MaxBody, "max-body", "SLUICE_MAX_BODY", 1<<20, "largest request body, a whole batch too (a byte size: 1048576, 512KiB, 1MiB)")
	f.Int(&c.MaxBatch, "max-batch", "SLUICE_MAX_BATCH", svc.DefaultMaxBatch, "most messages in one batch submission; more is 413")
	f.Duration(&c.MaxDelay, "max-delay", "SLUICE_MAX_DELAY", svc.DefaultMaxDelay, "how far ahead a submission's deliver_at or delay may be")
	f.Duration(&c.IdempotencyTTL, "idempotency-ttl", "SLUICE_IDEMPOTENCY_TTL", 24*time.Hour, "how long an idempotency key maps to its first message")
	f.Bool(&c.LegacyIdempotencyKeys, "legacy-idempotency-keys", "SLUICE_LEGACY_IDEMPOTENCY_KEYS", false, "claim idempotency keys where v0.3 does, so a repeat is recognised whichever version took it (during a rolling upgrade from v0.3, and for -idempotency-ttl after it)")
	f.Duration(&c.ReadHeaderTimeout, "read-header-timeout", "SLUICE_READ_HEADER_TIMEOUT", httpx.ReadHeaderTimeout, "how long a client has to send a request's headers; slower ones are disconnected")
	f.Int(&c.Replicas, "replicas", "SLUICE_REPLICAS", 1, "replicas of the streams, 1 or 3")
	f.Bytes(&c.RetryMaxBytes, "retry-max-bytes", "SLUICE_RETRY_MAX_BYTES", process.DefaultRetryMaxBytes, "JetStream storage of the retry stream (parked messages)")
	f.Int(&c.RetryRuleShare, "retry-rule-share", "SLUICE_RETRY_RULE_SHARE", process.DefaultRetryRuleShare, "percent of the retry stream one rule's parked and scheduled messages may take (1-100)")
	f.Bytes(&c.DeadMaxBytes, "dead-max-bytes", "SLUICE_DEAD_MAX_BYTES", process.DefaultDeadMaxBytes, "JetStream storage of the dead-letter stream")
	f.Bool(&c.DeadDropOldest, "dead-drop-oldest", "SLUICE_DEAD_DROP_OLDEST", false, "when the dead letters are full, delete the oldest (counted) instead of keeping the failed message in its queue")
	f.Bytes(&c.QueueMaxBytes, "queue-max-bytes", "SLUICE_QUEUE_MAX_BYTES", queue.DefaultMaxBytes, "JetStream storage of each queue rule's stream, unless the rule sets queue.max_bytes; 0: no limit of its own (only the store's)")
	f.Duration(&c.PublishWait, "publish-wait", "SLUICE_PUBLISH_WAIT", queue.DefaultPublishWait, "how long a submit waits for its stream's new leader (an election) before answering 503")
	f.Duration(&c.StatusKeep, "status-keep", "SLUICE_STATUS_KEEP", 0, "keep a record of each delivered message this long, for GET /v1/messages/{id}; 0s = off")
	f.Int64(&c.StatusKeepMax, "status-keep-max", "SLUICE_STATUS_KEEP_MAX", 1_000_000, "most delivered records kept, oldest dropped first")
	f.Duration(&c.AuditKeep, "audit-keep", "SLUICE_AUDIT_KEEP", 90*24*time.Hour, "how long operator changes are kept in the SLUICE_AUDIT stream")
	f.Int64(&c.AuditMax, "audit-max", "SLUICE_AUDIT_MAX", 100_000, "most operator changes kept, oldest dropped first")
	f.Duration(&c.ShutdownTimeout, "shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT", 10*time.Second, "on SIGTERM: time to finish in-flight requests")
	f.Duration(&c.RulesPoll, "rules-poll", "SLUICE_RULES_POLL", time.Second, "how often rules files are checked for changes")
	f.String(&c.LogFormat, "log-format", "SLUICE_LOG_FORMAT", "json", "json or text")
	f.String(&c.LogLevel, "log-level", "SLUICE_LOG_LEVEL", "info", "debug, info, warn or error")
	f.String(&c.TLSCert, "tls-cert", "SLUICE_TLS_CERT", "", "PEM certificate (chain) of the HTTP and gRPC listeners; reloaded when it changes")
	f.String(&c.TLSKey, "tls-key", "SLUICE_TLS_KEY", "", "PEM private key of -tls-cert")
	f.String(&c.TLSClientCA, "tls-client-ca", "SLUICE_TLS_CLIENT_CA", "", "PEM CA bundle: require client certificates it signed (mutual TLS)")
	f.List(&c.TLSClientNames, "tls-client-names", "SLUICE_TLS_CLIENT_NAMES", "", "with -tls-client-ca: client certificates must name one of these identities (URI, DNS, e-mail or IP SAN, or subject CN; a trailing * matches a prefix), comma-separated")
	f.List(&c.CheckClientNames, "check-client-names", "SLUICE_CHECK_CLIENT_NAMES", "", "client certificate identities that may check without a check token once -submit-tokens is set, comma-separated")
	f.String(&c.RedisCA, "redis-ca", "SLUICE_REDIS_CA", "", "PEM CA bundle of the Redis servers' certificates (rediss:// URLs)")
	f.String(&c.RedisCert, "redis-cert", "SLUICE_REDIS_CERT", "", "PEM client certificate for Redis (rediss:// URLs)")
	f.String(&c.RedisKey, "redis-key", "SLUICE_REDIS_KEY", "", "PEM private key of -redis-cert")
	f.String(&c.NATSCA, "nats-ca", "SLUICE_NATS_CA", "", "PEM CA bundle of the NATS servers' certificates")
	f.String(&c.NATSCert, "nats-cert", "SLUICE_NATS_CERT", "", "PEM client certificate for NATS")
	f.String(&c.NATSKey, "nats-key", "SLUICE_NATS_KEY", "", "PEM private key of -nats-cert")
	f.String(&c.NATSCreds, "nats-creds", "SLUICE_NATS_CREDS", "", "NATS user credentials file (JWT and NKey seed, as nsc writes it)")
	f.String(&c.NATSNKey, "nats-nkey", "SLUICE_NATS_NKEY", "", "NATS NKey seed file (an SU... seed)")
	f.String(&c.SinkCA, "sink-ca", "SLUICE_SINK_CA", "", "PEM CA bundle trusted for https:// sinks of the in-process drainer")
	f.List(&c.SignKeys, "sign-keys", "SLUICE_SIGN_KEYS", "", "HMAC key files, comma-separated: each signs HTTP deliveries (two during a key rotation)")
	f.String(&c.SignScheme, "sign-scheme", "SLUICE_SIGN_SCHEME", string(sign.SchemeSluice), "signature headers of HTTP deliveries: sluice (Sluice-Signature) or standard-webhooks (webhook-id, webhook-timestamp, webhook-signature)")
	f.Bool(&c.MergeDomainConfig, "merge-domain-config", "SLUICE_MERGE_DOMAIN_CONFIG", false, "merge rules documents of one domain, as envoy's MERGE_DOMAIN_CONFIG")
	f.Bool(&c.ShadowMode, "shadow-mode", "SLUICE_SHADOW_MODE", false, "answer every check OK overall, as envoy's SHADOW_MODE")
	f.Bool(&c.QuotaMode, "quota-mode", "SLUICE_QUOTA_MODE", false, "every descriptor in quota mode, as envoy's QUOTA_MODE")
	f.Bool(&c.ResponseDynamicMetadata, "response-dynamic-metadata", "SLUICE_RESPONSE_DYNAMIC_METADATA", false, "add envoy's dynamic_metadata to answers, as envoy's RESPONSE_DYNAMIC_METADATA")
	f.Bool(&c.GRPCReflection, "grpc-reflection", "SLUICE_GRPC_REFLECTION", false, "serve gRPC server reflection on -grpc")
	f.Int64(&c.OverrideMaxFactor, "override-max-factor", "SLUICE_OVERRIDE_MAX_FACTOR", decide.DefaultOverrideMaxFactor, "a check's limit override may ask at most this many times its rule's rate, unless the rule's limit_override says")
	f.Duration(&c.OverrideMaxWindow, "override-max-window", "SLUICE_OVERRIDE_MAX_WINDOW", decide.DefaultOverrideMaxWindow, "the longest window a check's limit override may ask, unless its rule's limit_override says")
	f.Bool(&c.GRPCResponseHeaders, "grpc-response-headers", "SLUICE_GRPC_RESPONSE_HEADERS", false, "add rate-limit headers to every gRPC answer, not only for rules with response_headers")
	f.Bytes(&c.LocalCacheBytes, "local-cache-bytes", "SLUICE_LOCAL_CACHE_SIZE_IN_BYTES", 0, "size of the local over-limit cache, as envoy's LOCAL_CACHE_SIZE_IN_BYTES; 0 disables")
	f.Int(&c.DetailedMetricValues, "detailed-metric-values", "SLUICE_DETAILED_METRIC_VALUES", decide.DefaultDetailedMetricValues, "distinct values per detailed_metric rule in sluice_checks_detailed_total, the rest counted as _other")
	// Actions, not settings: no environment variable.
	f.ListAction(&c.CheckConfig, "check-config", "validate these rules files or directories (comma-separated, as -rules) and exit")
	f.BoolAction(&c.Version, "version", "print the version and exit")
	return f
}

// Flags lists the ingress's flags (not the -check-config and -version actions)
// with their environment variables and defaults.
func Flags() []process.Flag {
	var c Config
	return declareFlags(&c, func(string) string { return "" }, io.Discard).Flags()
}

// ParseFlags reads args (without the program name) and the environment (getenv;
// nil = os.Getenv) into a validated Config. Errors name the flag and the value;
// they match process.ErrUsage.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	if err := declareFlags(&c, getenv, stderr).Parse(args); err != nil {
		return c, process.UsageError(err)
	}
	if c.Version {
		return c, nil
	}
	return c, process.UsageError(c.Validate())
}

// Validate checks the config; an error names the flag and its bad value.
func (c *Config) Validate() error {
	switch {
	case len(c.CheckConfig) == 0 && len(c.Rules) == 0:
		return errors.New("-rules is required (a rules file or directory; see deploy/examples)")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("-tls-cert and -tls-key: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("-tls-client-ca: needs -tls-cert and -tls-key (client certificates are only asked for over TLS)")
	case (c.NATSCert == "") != (c.NATSKey == ""):
		return errors.New("-nats-cert and -nats-key: give both or neither")
	case c.NATSCreds != "" && c.NATSNKey != "":
		return errors.New("-nats-creds and -nats-nkey: give one (a credentials file holds its own NKey seed)")
	case len(c.TLSClientNames) > 0 && c.TLSClientCA == "":
		return errors.New("-tls-client-names: needs -tls-client-ca (names are read from verified client certificates)")
	case len(c.CheckClientNames) > 0 && c.TLSClientCA == "":
		return errors.New("-check-client-names: needs -tls-client-ca (names are read from verified client certificates)")
	case c.OverrideMaxFactor < 1 || c.OverrideMaxFactor > rules.MaxOverrideFactor:
		return fmt.Errorf("-override-max-factor: want 1 to %d, got %d", rules.MaxOverrideFactor, c.OverrideMaxFactor)
	case c.OverrideMaxWindow <= 0 || c.OverrideMaxWindow > rules.MaxOverrideWindow:
		return fmt.Errorf("-override-max-window: want a positive duration up to %s, got %s", rules.MaxOverrideWindow, c.OverrideMaxWindow)
	case c.AdminToken != "" && c.AdminTokenFile != "":
		return errors.New("-admin-token-file: give it or -admin-token, not both")
	case c.AdminToken != "" && len(c.AdminToken) < svc.MinTokenLength:
		// Outside `sluice dev` (which builds its Config without flags, so never gets here):
		// a short token is guessed; every token file has the same minimum.
		return fmt.Errorf("-admin-token: %d characters, want at least %d (e.g. openssl rand -hex 32)", len(c.AdminToken), svc.MinTokenLength)
	case c.AuditKeep <= 0:
		return fmt.Errorf("-audit-keep: want a positive duration, got %s", c.AuditKeep)
	case c.AuditMax <= 0:
		return fmt.Errorf("-audit-max: want a positive number of records, got %d", c.AuditMax)
	case c.LocalCacheBytes < 0:
		return fmt.Errorf("-local-cache-bytes: want 0 (off) or a positive size, got %d", c.LocalCacheBytes)
	case c.DetailedMetricValues < 0 || c.DetailedMetricValues > 1<<20:
		return fmt.Errorf("-detailed-metric-values: want 0 to %d, got %d", 1<<20, c.DetailedMetricValues)
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("-read-header-timeout: want a positive duration, got %s", c.ReadHeaderTimeout)
	case c.IdempotencyTTL <= 0:
		return fmt.Errorf("-idempotency-ttl: want a positive duration, got %s", c.IdempotencyTTL)
	case c.MaxDelay <= 0:
		return fmt.Errorf("-max-delay: want a positive duration, got %s", c.MaxDelay)
	case c.MaxBatch <= 0:
		return fmt.Errorf("-max-batch: want a positive number of messages, got %d", c.MaxBatch)
	case c.MaxBody <= 0:
		return fmt.Errorf("-max-body: want a positive size, got %d", c.MaxBody)
	case c.StatusKeep < 0:
		return fmt.Errorf("-status-keep: want 0s (off) or a positive duration, got %s", c.StatusKeep)
	case c.StatusKeepMax <= 0:
		return fmt.Errorf("-status-keep-max: want a positive number of records, got %d", c.StatusKeepMax)
	case c.Replicas != 1 && c.Replicas != 3:
		return fmt.Errorf("-replicas: want 1 or 3, got %d", c.Replicas)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout: want a positive duration, got %s", c.ShutdownTimeout)
	case c.RulesPoll <= 0:
		return fmt.Errorf("-rules-poll: want a positive duration, got %s", c.RulesPoll)
	case c.Engine != drain.EngineClaim && c.Engine != drain.EngineOwn:
		return fmt.Errorf("-engine: want claim or own, got %q", c.Engine)
	case c.DrainWorkers < 1:
		return fmt.Errorf("-drain-workers: want a positive number, got %d", c.DrainWorkers)
	case c.ReadmitMaxBackoff <= 0:
		return fmt.Errorf("-readmit-max-backoff: want a positive duration, got %s", c.ReadmitMaxBackoff)
	}
	if err := process.CheckStreamBytes(c.RetryMaxBytes, c.DeadMaxBytes); err != nil {
		return err
	}
	if _, err := sign.ParseScheme(c.SignScheme); err != nil {
		return fmt.Errorf("-sign-scheme: %w", err)
	}
	if c.RetryRuleShare != 0 { // 0: a config built in code, retry's default
		if err := process.CheckRuleShare(c.RetryRuleShare); err != nil {
			return err
		}
	}
	if err := process.CheckLog(c.LogFormat, c.LogLevel); err != nil {
		return err
	}
	if len(c.CheckConfig) == 0 {
		if _, err := process.ParseRedisURL(c.RedisURL, 0); err != nil {
			return err
		}
		if err := process.CheckRedisTLS(c.RedisURL, c.RedisCA, c.RedisCert, c.RedisKey); err != nil {
			return err
		}
	}
	return nil
}
