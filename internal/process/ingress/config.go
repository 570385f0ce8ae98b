package ingress

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-io/sluice/internal/decide"
	"github.com/sluice-io/sluice/internal/httpx"
	svc "github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// Config is everything the ingress process is told from outside: the process.Settings it
// shares with the drainer (NATS, Redis, TLS, logging, the streams, the -drain drainer's
// settings), and the ingress's own. Every field is a flag with a SLUICE_* environment
// variable (the flag wins); its default is written once, in declareFlags (and
// Settings.Declare), and in docs/configuration.md's table (checked by a test).
type Config struct {
	process.Settings

	AdminToken string // -admin-token: bearer token of /v1/admin; empty disables the admin API (401).
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

	// CheckConfig validates rules files or directories, comma-separated as -rules, and
	// exits. -check-config (an action: no environment variable); default empty.
	CheckConfig []string

	// Envoy parity knobs (docs/envoy.md), each off by default as in
	// envoyproxy/ratelimit: -merge-domain-config, -shadow-mode, -quota-mode,
	// -response-dynamic-metadata, -local-cache-bytes (0 = off), and
	// -detailed-metric-values (default 100).
	MergeDomainConfig       bool
	ShadowMode              bool
	QuotaMode               bool
	ResponseDynamicMetadata bool
	LocalCacheBytes         int64
	DetailedMetricValues    int

	// Drain runs a drainer (and re-admitter) inside this process, with the Settings'
	// drain settings (-drain-workers, -engine, -readmit-max-backoff, -sink-ca, -sign-keys,
	// -sign-scheme). -drain; default false (production runs separate drainer processes;
	// `sluice dev` turns it on).
	Drain bool

	MaxBody  int64         // -max-body: largest request body (a whole batch too), a byte size. Default 1MiB.
	MaxBatch int           // -max-batch: most messages in one batch submission. Default 500.
	MaxDelay time.Duration // -max-delay: how far ahead deliver_at / delay may be. Default 720h (30 days).

	// ReadHeaderTimeout is how long a client has to send a request's headers
	// (slowloris). -read-header-timeout; default 5s. The listener's other limits are fixed
	// (docs/security.md "Hostile input").
	ReadHeaderTimeout time.Duration
	// IdempotencyTTL is how long an idempotency key maps to its first message.
	// -idempotency-ttl; default 24h.
	IdempotencyTTL time.Duration
	// LegacyIdempotencyKeys claims idempotency keys in v0.3's Redis layout (and writes this
	// version's too), for a rolling upgrade from v0.3. -legacy-idempotency-keys; default false.
	LegacyIdempotencyKeys bool
	// RetryRuleShare is the percentage of the retry stream one rule's messages may take
	// (-retry-rule-share, default 25; 0 in a config built in code: the same).
	RetryRuleShare int
	// QueueMaxBytes bounds each queue rule's stream unless the rule sets queue.max_bytes.
	// -queue-max-bytes; default 1GiB; 0: no limit of the stream's own (only the store's).
	QueueMaxBytes int64
	// PublishWait is how long a submit waits for its stream's new leader before a 503.
	// -publish-wait; default 10s.
	PublishWait time.Duration

	// CheckClientNames: client certificate identities that may use the check API without
	// a check token once -submit-tokens is set (-check-client-names; default empty).
	CheckClientNames []string
	// Admin and submit credentials (docs/security.md): -admin-tokens, -admin-token-file,
	// -submit-tokens. All default empty (off).
	AdminTokensFile  string
	AdminTokenFile   string
	SubmitTokensFile string
	// AuditKeep is how long operator changes are kept in the SLUICE_AUDIT stream, and
	// AuditMax how many at most. -audit-keep, default 2160h (90 days); -audit-max,
	// default 100000.
	AuditKeep time.Duration
	AuditMax  int64
}

// declareFlags declares the ingress's flags into c.
func declareFlags(c *Config, getenv func(string) string, stderr io.Writer) *process.FlagSet {
	f := process.NewFlagSet("ingress", getenv, stderr)
	c.Settings.Declare(f, process.RoleIngress)
	f.String(&c.GRPCAddr, "grpc", "SLUICE_GRPC_ADDR", ":8081", "envoy rate limit service (gRPC) listen address; empty disables")
	f.String(&c.AdminToken, "admin-token", "SLUICE_ADMIN_TOKEN", "", "bearer token of the admin API (scope operate); empty: no static token")
	f.String(&c.AdminTokenFile, "admin-token-file", "SLUICE_ADMIN_TOKEN_FILE", "", "file holding the -admin-token value")
	f.String(&c.AdminTokensFile, "admin-tokens", "SLUICE_ADMIN_TOKENS", "", "file of scoped admin tokens, 'name scope token' lines")
	f.String(&c.SubmitTokensFile, "submit-tokens", "SLUICE_SUBMIT_TOKENS", "", "file of submit tokens: POST /v1/messages then needs one")
	f.Bool(&c.Drain, "drain", "SLUICE_DRAIN", false, "run a drainer in this process too")
	f.Bytes(&c.MaxBody, "max-body", "SLUICE_MAX_BODY", 1<<20, "largest request body, a whole batch too (a byte size: 1048576, 512KiB, 1MiB)")
	f.Int(&c.MaxBatch, "max-batch", "SLUICE_MAX_BATCH", svc.DefaultMaxBatch, "most messages in one batch submission; more is 413")
	f.Duration(&c.MaxDelay, "max-delay", "SLUICE_MAX_DELAY", svc.DefaultMaxDelay, "how far ahead a submission's deliver_at or delay may be")
	f.Duration(&c.IdempotencyTTL, "idempotency-ttl", "SLUICE_IDEMPOTENCY_TTL", 24*time.Hour, "how long an idempotency key maps to its first message")
	f.Bool(&c.LegacyIdempotencyKeys, "legacy-idempotency-keys", "SLUICE_LEGACY_IDEMPOTENCY_KEYS", false, "claim idempotency keys where v0.3 does, so a repeat is recognised whichever version took it (during a rolling upgrade from v0.3, and for -idempotency-ttl after it)")
	f.Duration(&c.ReadHeaderTimeout, "read-header-timeout", "SLUICE_READ_HEADER_TIMEOUT", httpx.ReadHeaderTimeout, "how long a client has to send a request's headers; slower ones are disconnected")
	f.Int(&c.RetryRuleShare, "retry-rule-share", "SLUICE_RETRY_RULE_SHARE", process.DefaultRetryRuleShare, "percent of the retry stream one rule's parked and scheduled messages may take (1-100)")
	f.Bytes(&c.QueueMaxBytes, "queue-max-bytes", "SLUICE_QUEUE_MAX_BYTES", queue.DefaultMaxBytes, "JetStream storage of each queue rule's stream, unless the rule sets queue.max_bytes; 0: no limit of its own (only the store's)")
	f.Duration(&c.PublishWait, "publish-wait", "SLUICE_PUBLISH_WAIT", queue.DefaultPublishWait, "how long a submit waits for its stream's new leader (an election) before answering 503")
	f.Duration(&c.AuditKeep, "audit-keep", "SLUICE_AUDIT_KEEP", 90*24*time.Hour, "how long operator changes are kept in the SLUICE_AUDIT stream")
	f.Int64(&c.AuditMax, "audit-max", "SLUICE_AUDIT_MAX", 100_000, "most operator changes kept, oldest dropped first")
	f.List(&c.CheckClientNames, "check-client-names", "SLUICE_CHECK_CLIENT_NAMES", "", "client certificate identities that may check without a check token once -submit-tokens is set, comma-separated")
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

// Validate checks the config (the shared Settings, then the ingress's own); an error
// names the flag and its bad value.
func (c *Config) Validate() error {
	// -check-config validates rules files and exits: no -rules, no connections.
	if err := c.Settings.Validate(process.RoleIngress, len(c.CheckConfig) == 0); err != nil {
		return err
	}
	switch {
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
	}
	if c.RetryRuleShare != 0 { // 0: a config built in code, retry's default
		if err := process.CheckRuleShare(c.RetryRuleShare); err != nil {
			return err
		}
	}
	return nil
}
