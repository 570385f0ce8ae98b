package process

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/retry"
)

// Role names the process that declares the shared settings. A few flags say something
// different in each (the HTTP listener's default port, the stop timeout, what -replicas
// covers), and -workers is -drain-workers in the ingress, whose drainer is optional; the
// flag table says which, row by row.
type Role int

const (
	RoleIngress Role = iota // cmd/ingress, and `sluice dev`
	RoleDrainer             // cmd/drainer
)

// pick returns the ingress's or the drainer's choice: a row of the flag table that differs.
func pick[T any](r Role, ingress, drainer T) T {
	if r == RoleIngress {
		return ingress
	}
	return drainer
}

// Settings is what the ingress and the drainer are both told: the rules, the HTTP and pprof
// listeners and their TLS, NATS and Redis and how to reach them, the streams both create,
// logging, the stop, and the drain settings (a drainer's, and the ingress's -drain one's:
// workers, engine, re-admission, sink TLS, signatures). Every field is a flag with a SLUICE_*
// environment variable (the flag wins); its default is written once, in Declare (and in
// docs/configuration.md's tables, checked by TestREADMEFlagTables), and it is checked once,
// in Validate. ingress.Config and DrainerConfig embed it.
type Settings struct {
	Rules     []string // -rules: rules files or directories, comma-separated. Required (the ingress's -check-config aside).
	HTTPAddr  string   // -http: the ingress's API (":8080"), the drainer's /metrics, /healthz, /readyz (":8082").
	DebugAddr string   // -debug-addr: Go's pprof on a listener of its own; keep it off public networks. Default empty (off).
	NATSURL   string   // -nats: NATS server URL(s), comma-separated.
	RedisURL  string   // -redis: redis://, rediss://, unix://, Cluster or Sentinel URL (ParseRedisURL).
	// Replicas of the streams this process creates (1 or 3). -replicas.
	Replicas int
	// RetryMaxBytes and DeadMaxBytes bound the JetStream storage of the retry and
	// dead-letter streams (file storage is reserved up front: a NATS whose store is
	// smaller refuses them). -retry-max-bytes, -dead-max-bytes.
	RetryMaxBytes, DeadMaxBytes int64
	// DeadDropOldest: a full dead-letter stream deletes its oldest dead letters (counted)
	// instead of refusing new ones. -dead-drop-oldest.
	DeadDropOldest bool
	// StatusKeep keeps a record of each delivered message this long, so GET
	// /v1/messages/{id} answers "delivered" (drainers write them, the ingress reads them:
	// set it the same on both); 0 = off. StatusKeepMax bounds them. -status-keep, -status-keep-max.
	StatusKeep    time.Duration
	StatusKeepMax int64
	// ShutdownTimeout: on SIGTERM, the time to finish in-flight requests (ingress) or
	// deliveries (drainer). -shutdown-timeout.
	ShutdownTimeout time.Duration
	RulesPoll       time.Duration // -rules-poll: how often rules files are checked for changes.
	// LimitsRedisTimeout is how long an admission-limit or check decision waits for Redis
	// before it is decided locally (degraded mode, bucket.DegradedConfig.Timeout);
	// LimitsProbeEvery how often, while degraded, one decision tries Redis again
	// (bucket.DegradedConfig.ProbeInterval). -limits-redis-timeout (default 100ms),
	// -limits-probe-every (default 1s). Both processes decide limits: the ingress admits
	// and checks, every drainer's re-admitter admits parked messages again.
	LimitsRedisTimeout time.Duration
	LimitsProbeEvery   time.Duration
	LogFormat          string // -log-format: json or text.
	LogLevel           string // -log-level: debug, info, warn, error.

	// Drain settings: the drainer's, and those of the ingress's in-process drainer (-drain).
	Workers int // -workers (drainer), -drain-workers (ingress): deliveries in flight per queue rule.
	// Engine is how drainers share keys: drain.EngineClaim or drain.EngineOwn. -engine;
	// every drainer must run the same (the ingress's -drain drainer runs it).
	Engine string
	// ReadmitMaxBackoff caps the wait between two re-admission attempts of a parked
	// message that still finds no room. -readmit-max-backoff.
	ReadmitMaxBackoff time.Duration
	SinkCA            string   // -sink-ca: CA bundle of https:// sinks; default system roots.
	SignKeys          []string // -sign-keys: HMAC key files; default none (unsigned).
	SignScheme        string   // -sign-scheme: sluice or standard-webhooks.

	// TLS on the listeners (-tls-cert, -tls-key, -tls-client-ca; mutual TLS with a client
	// CA) and, with a client CA, the identities a client certificate must name
	// (-tls-client-names; empty: any the CA signed). Default off.
	TLSCert, TLSKey, TLSClientCA string
	TLSClientNames               []string
	// RedisCA, RedisCert, RedisKey: TLS to Redis (rediss:// URLs) trusting this CA
	// bundle and presenting this client certificate (-redis-ca, -redis-cert, -redis-key;
	// default empty: system roots, no client certificate).
	RedisCA, RedisCert, RedisKey string
	// NATSCA, NATSCert, NATSKey: TLS to NATS (-nats-ca, -nats-cert, -nats-key).
	NATSCA, NATSCert, NATSKey string
	// NATSCreds (-nats-creds) is a NATS user credentials file (JWT and NKey seed);
	// NATSNKey (-nats-nkey) an NKey seed file. Either keeps the NATS secret out of -nats,
	// the environment and the process list. Default empty (none).
	NATSCreds, NATSNKey string

	// Version prints the build's version and exits. -version (an action).
	Version bool
}

// Declare declares the shared settings into f for the process r: the one flag table of
// what the processes share.
func (s *Settings) Declare(f *FlagSet, r Role) {
	f.List(&s.Rules, "rules", "SLUICE_RULES", "", "rules files or directories, comma-separated (required)")
	f.String(&s.HTTPAddr, "http", "SLUICE_HTTP_ADDR", pick(r, ":8080", ":8082"),
		pick(r, "HTTP API listen address, also /metrics, /healthz, /readyz", "listen address of /metrics, /healthz, /readyz"))
	f.String(&s.DebugAddr, "debug-addr", "SLUICE_DEBUG_ADDR", "",
		pick(r, "pprof listen address, e.g. 127.0.0.1:6070; empty disables", "pprof listen address, e.g. 127.0.0.1:6071; empty disables"))
	f.String(&s.NATSURL, "nats", "SLUICE_NATS_URL", "nats://127.0.0.1:4222", "NATS URL(s), comma-separated")
	f.String(&s.RedisURL, "redis", "SLUICE_REDIS_URL", "redis://127.0.0.1:6379", "Redis URL: redis://, rediss://, unix://, a cluster (redis://h1:p?addr=h2:p) or Sentinel (redis+sentinel://s1:26379?master_name=M)")
	f.Int(&s.Replicas, "replicas", "SLUICE_REPLICAS", 1, pick(r, "replicas of the streams, 1 or 3", "replicas of the retry and dead-letter streams, 1 or 3"))
	f.Bytes(&s.RetryMaxBytes, "retry-max-bytes", "SLUICE_RETRY_MAX_BYTES", DefaultRetryMaxBytes, "JetStream storage of the retry stream (parked messages)")
	f.Bytes(&s.DeadMaxBytes, "dead-max-bytes", "SLUICE_DEAD_MAX_BYTES", DefaultDeadMaxBytes, "JetStream storage of the dead-letter stream")
	f.Bool(&s.DeadDropOldest, "dead-drop-oldest", "SLUICE_DEAD_DROP_OLDEST", false, "when the dead letters are full, delete the oldest (counted) instead of keeping the failed message in its queue")
	f.Duration(&s.StatusKeep, "status-keep", "SLUICE_STATUS_KEEP", 0, "keep a record of each delivered message this long, for GET /v1/messages/{id}; 0s = off")
	f.Int64(&s.StatusKeepMax, "status-keep-max", "SLUICE_STATUS_KEEP_MAX", 1_000_000, "most delivered records kept, oldest dropped first")
	f.Duration(&s.ShutdownTimeout, "shutdown-timeout", "SLUICE_SHUTDOWN_TIMEOUT", pick(r, 10*time.Second, 30*time.Second),
		pick(r, "on SIGTERM: time to finish in-flight requests", "on SIGTERM: stop claiming, finish in-flight deliveries within this"))
	f.Duration(&s.RulesPoll, "rules-poll", "SLUICE_RULES_POLL", time.Second, "how often rules files are checked for changes")
	f.Duration(&s.LimitsRedisTimeout, "limits-redis-timeout", "SLUICE_LIMITS_REDIS_TIMEOUT", 100*time.Millisecond,
		"how long an admission-limit or check decision waits for Redis before it is decided locally (degraded mode)")
	f.Duration(&s.LimitsProbeEvery, "limits-probe-every", "SLUICE_LIMITS_PROBE_EVERY", time.Second,
		"in degraded mode, how often one limit decision tries Redis again")
	f.String(&s.LogFormat, "log-format", "SLUICE_LOG_FORMAT", "json", "json or text")
	f.String(&s.LogLevel, "log-level", "SLUICE_LOG_LEVEL", "info", "debug, info, warn or error")

	f.Int(&s.Workers, pick(r, "drain-workers", "workers"), pick(r, "SLUICE_DRAIN_WORKERS", "SLUICE_WORKERS"), 32,
		pick(r, "deliveries in flight at once per queue rule of the in-process drainer", "deliveries in flight at once per queue rule; each rule has its own"))
	f.String(&s.Engine, "engine", "SLUICE_ENGINE", drain.EngineOwn, pick(r,
		"the drainers' engine, as their -engine (every drainer and ingress must run the same): own (admission is the publish alone) or claim (deprecated: admission also counts depth and marks keys due in Redis); the in-process drainer (-drain) runs it too",
		"how drainers share keys: own (whole partitions owned, keys paced in memory) or claim (deprecated: each key claimed in Redis, removed in a later release); every drainer must run the same (docs/operations.md: cut-over)"))
	f.Duration(&s.ReadmitMaxBackoff, "readmit-max-backoff", "SLUICE_READMIT_MAX_BACKOFF", 5*time.Minute,
		pick(r, "longest wait between re-admission attempts of a parked message (with -drain)", "longest wait between re-admission attempts of a parked message"))
	f.String(&s.SinkCA, "sink-ca", "SLUICE_SINK_CA", "", pick(r, "PEM CA bundle trusted for https:// sinks of the in-process drainer", "PEM CA bundle trusted for https:// sinks"))
	f.List(&s.SignKeys, "sign-keys", "SLUICE_SIGN_KEYS", "", "HMAC key files, comma-separated: each signs HTTP deliveries (two during a key rotation)")
	f.String(&s.SignScheme, "sign-scheme", "SLUICE_SIGN_SCHEME", string(sign.SchemeSluice), "signature headers of HTTP deliveries: sluice (Sluice-Signature) or standard-webhooks (webhook-id, webhook-timestamp, webhook-signature)")

	f.String(&s.TLSCert, "tls-cert", "SLUICE_TLS_CERT", "", pick(r, "PEM certificate (chain) of the HTTP and gRPC listeners; reloaded when it changes", "PEM certificate of the -http listener; reloaded when it changes"))
	f.String(&s.TLSKey, "tls-key", "SLUICE_TLS_KEY", "", "PEM private key of -tls-cert")
	f.String(&s.TLSClientCA, "tls-client-ca", "SLUICE_TLS_CLIENT_CA", "", pick(r, "PEM CA bundle: require client certificates it signed (mutual TLS)", "PEM CA bundle: require client certificates it signed"))
	f.List(&s.TLSClientNames, "tls-client-names", "SLUICE_TLS_CLIENT_NAMES", "", pick(r,
		"with -tls-client-ca: client certificates must name one of these identities (URI, DNS, e-mail or IP SAN, or subject CN; a trailing * matches a prefix), comma-separated",
		"with -tls-client-ca: client certificates must name one of these identities, comma-separated"))
	f.String(&s.RedisCA, "redis-ca", "SLUICE_REDIS_CA", "", "PEM CA bundle of the Redis servers' certificates (rediss:// URLs)")
	f.String(&s.RedisCert, "redis-cert", "SLUICE_REDIS_CERT", "", "PEM client certificate for Redis (rediss:// URLs)")
	f.String(&s.RedisKey, "redis-key", "SLUICE_REDIS_KEY", "", "PEM private key of -redis-cert")
	f.String(&s.NATSCA, "nats-ca", "SLUICE_NATS_CA", "", pick(r, "PEM CA bundle of the NATS servers' certificates", "PEM CA bundle of the NATS servers"))
	f.String(&s.NATSCert, "nats-cert", "SLUICE_NATS_CERT", "", "PEM client certificate for NATS")
	f.String(&s.NATSKey, "nats-key", "SLUICE_NATS_KEY", "", "PEM private key of -nats-cert")
	f.String(&s.NATSCreds, "nats-creds", "SLUICE_NATS_CREDS", "", "NATS user credentials file (JWT and NKey seed, as nsc writes it)")
	f.String(&s.NATSNKey, "nats-nkey", "SLUICE_NATS_NKEY", "", "NATS NKey seed file (an SU... seed)")

	f.BoolAction(&s.Version, "version", "print the version and exit")
}

// Validate checks the shared settings; an error names the flag and its bad value. With
// connect false (the ingress's -check-config, which validates rules files and exits) the
// process will not connect, so -rules and the Redis URL are not required to make sense.
// r names -workers as the process spells it.
func (s *Settings) Validate(r Role, connect bool) error {
	switch {
	case connect && len(s.Rules) == 0:
		return errors.New("-rules is required (a rules file or directory; see deploy/examples)")
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return errors.New("-tls-cert and -tls-key: give both or neither")
	case s.TLSClientCA != "" && s.TLSCert == "":
		return errors.New("-tls-client-ca: needs -tls-cert and -tls-key (client certificates are only asked for over TLS)")
	case (s.NATSCert == "") != (s.NATSKey == ""):
		return errors.New("-nats-cert and -nats-key: give both or neither")
	case s.NATSCreds != "" && s.NATSNKey != "":
		return errNATSCredsAndNKey
	case len(s.TLSClientNames) > 0 && s.TLSClientCA == "":
		return errors.New("-tls-client-names: needs -tls-client-ca (names are read from verified client certificates)")
	case s.Replicas != 1 && s.Replicas != 3:
		return fmt.Errorf("-replicas: want 1 or 3, got %d", s.Replicas)
	case s.ShutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout: want a positive duration, got %s", s.ShutdownTimeout)
	case s.RulesPoll <= 0:
		return fmt.Errorf("-rules-poll: want a positive duration, got %s", s.RulesPoll)
	case s.LimitsRedisTimeout <= 0:
		return fmt.Errorf("-limits-redis-timeout: want a positive duration, got %s", s.LimitsRedisTimeout)
	case s.LimitsProbeEvery <= 0:
		return fmt.Errorf("-limits-probe-every: want a positive duration, got %s", s.LimitsProbeEvery)
	case s.StatusKeep < 0:
		return fmt.Errorf("-status-keep: want 0s (off) or a positive duration, got %s", s.StatusKeep)
	case s.StatusKeepMax <= 0:
		return fmt.Errorf("-status-keep-max: want a positive number of records, got %d", s.StatusKeepMax)
	case s.Workers < 1:
		return fmt.Errorf("-%s: want a positive number, got %d", pick(r, "drain-workers", "workers"), s.Workers)
	case s.Engine != drain.EngineClaim && s.Engine != drain.EngineOwn:
		return fmt.Errorf("-engine: want claim or own, got %q", s.Engine)
	case s.ReadmitMaxBackoff <= 0:
		return fmt.Errorf("-readmit-max-backoff: want a positive duration, got %s", s.ReadmitMaxBackoff)
	}
	if err := CheckStreamBytes(s.RetryMaxBytes, s.DeadMaxBytes); err != nil {
		return err
	}
	if _, err := sign.ParseScheme(s.SignScheme); err != nil {
		return fmt.Errorf("-sign-scheme: %w", err)
	}
	if err := CheckLog(s.LogFormat, s.LogLevel); err != nil {
		return err
	}
	if !connect {
		return nil
	}
	if _, err := ParseRedisURL(s.RedisURL, 0); err != nil {
		return err
	}
	return CheckRedisTLS(s.RedisURL, s.RedisCA, s.RedisCert, s.RedisKey)
}

// OpenTLS reads the certificates and keys the settings name: the listeners' (nil without
// -tls-cert; its expiry gauge registered on reg), the sinks' CA (-sink-ca) and the signing
// keys (-sign-keys). Both processes call it first: a process that cannot serve or deliver
// as configured must not start.
func (s *Settings) OpenTLS(log *slog.Logger, reg prometheus.Registerer) (listeners *tlsx.Server, sinks *tlsx.Client, signer *sign.Signer, err error) {
	if s.TLSCert != "" {
		listeners, err = tlsx.NewServer(tlsx.ServerFiles{CertFile: s.TLSCert, KeyFile: s.TLSKey, ClientCAFile: s.TLSClientCA, ClientNames: s.TLSClientNames, Logger: log})
		if err != nil {
			return nil, nil, nil, err
		}
		reg.MustRegister(listeners.NotAfterCollector())
	}
	if sinks, err = tlsx.NewClient("-sink-ca", s.SinkCA); err != nil {
		return nil, nil, nil, err
	}
	if signer, err = sign.NewSigner(s.SignKeys, log); err != nil {
		return nil, nil, nil, err
	}
	return listeners, sinks, signer, nil
}

// StackConfig is the part of a process's StackConfig the settings say: NATS and Redis and
// how to reach them, and the streams both processes create. The process adds the rest
// (rules, logger, registry, its own knobs).
func (s *Settings) StackConfig(name string) StackConfig {
	return StackConfig{
		Name: name, NATSURL: s.NATSURL, RedisURL: s.RedisURL, Replicas: s.Replicas,
		NATSCA: s.NATSCA, NATSCert: s.NATSCert, NATSKey: s.NATSKey, NATSCreds: s.NATSCreds, NATSNKey: s.NATSNKey,
		RedisTLS:   RedisTLS{CA: s.RedisCA, Cert: s.RedisCert, Key: s.RedisKey},
		StatusKeep: s.StatusKeep, StatusKeepMax: s.StatusKeepMax,
		RetryMaxBytes: s.RetryMaxBytes, DeadMaxBytes: s.DeadMaxBytes, DeadDropOldest: s.DeadDropOldest,
		Engine:             s.Engine,
		LimitsRedisTimeout: s.LimitsRedisTimeout, LimitsProbeEvery: s.LimitsProbeEvery,
	}
}

// DrainDeps is the part of a drainer's DrainDeps the settings say: the drain loop's workers,
// engine and stop timeout, the re-admitter's backoff, the sinks' TLS and the signatures. The
// process adds the stack, the rules, the logger and the registry (the drainer, its leases).
func (s *Settings) DrainDeps(sinks *tlsx.Client, signer *sign.Signer) DrainDeps {
	return DrainDeps{
		SinkTLS: sinks, Signer: signer, SignScheme: sign.Scheme(s.SignScheme),
		Drain:   drain.Config{Workers: s.Workers, StopTimeout: s.ShutdownTimeout, Engine: s.Engine},
		Readmit: retry.ReadmitterConfig{MaxBackoff: s.ReadmitMaxBackoff},
	}
}
