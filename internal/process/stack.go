package process

// A Stack is what every sluice process stands on — the NATS and Redis connections, the
// queue, retry and dead-letter streams, the outflow scheduler, the status store, the live
// overrides and the admission path — opened once, the same way for the ingress and the
// drainer. Each process adds its own part on top (the HTTP API, the drain loop).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/retryrules"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/status"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// StackConfig says how to open a Stack.
type StackConfig struct {
	Name     string // process kind for logs and the NATS connection name: "ingress", "drainer"
	NATSURL  string
	RedisURL string
	Replicas int               // streams and the overrides bucket: 1 or 3
	Rules    func() *rules.Set // the rules in force
	// Limits decides admission limits; nil = Redis, degrading to a local limiter while
	// Redis is unreachable (OnDegraded is told).
	Limits     bucket.Store
	OnDegraded func(degraded bool)
	// LimitsRedisTimeout and LimitsProbeEvery are the degrading limiter's Timeout and
	// ProbeInterval (bucket.DegradedConfig; -limits-redis-timeout, -limits-probe-every;
	// 0: its defaults, 100ms and 1s).
	LimitsRedisTimeout, LimitsProbeEvery time.Duration
	// OnOverride is called after a rule's override changed (e.g. to apply a capacity).
	OnOverride func(rule string)
	// RedisPoolSize is the least Redis connection pool size. Default 256.
	RedisPoolSize int
	// IdempotencyTTL is how long an idempotency key maps to its first message (0: 24 h).
	IdempotencyTTL time.Duration
	// LegacyIdempotency also claims idempotency keys in v0.3's layout (queue.SchedulerConfig).
	LegacyIdempotency bool
	// StatusKeep > 0 keeps records of delivered messages that long, at most StatusKeepMax
	// (0: a million) of them (status.DeliveredRecords).
	StatusKeep    time.Duration
	StatusKeepMax int64
	// RetryMaxBytes and DeadMaxBytes bound the retry and dead-letter streams' storage
	// (-retry-max-bytes, -dead-max-bytes; 0: retry's own defaults).
	RetryMaxBytes, DeadMaxBytes int64
	// RetryRuleShare is the percentage of the retry stream one rule's messages may take
	// (-retry-rule-share, retry.Config.RuleShare); 0: retry's default (25).
	RetryRuleShare int
	// DeadDropOldest deletes the oldest dead letters (counted) when the dead-letter stream is
	// full, instead of refusing the new one (-dead-drop-oldest; default false).
	DeadDropOldest bool
	// QueueMaxBytes bounds each queue rule's stream unless the rule sets queue.max_bytes
	// (-queue-max-bytes; 0: queue.DefaultMaxBytes).
	QueueMaxBytes int64
	// PublishWait is how long a submit waits for its stream's new leader (-publish-wait;
	// 0: queue.DefaultPublishWait).
	PublishWait time.Duration
	// Registry registers the stack's own metrics (dead-letter refusals and drops); nil: none.
	Registry prometheus.Registerer
	Logger   *slog.Logger

	// NATSCA trusts the CAs of this PEM file for NATS servers' certificates (tls:// URLs or
	// servers that require TLS); NATSCert and NATSKey are a client certificate for NATS.
	// Files are re-read on every (re)connect. Empty: system roots, no client certificate.
	NATSCA, NATSCert, NATSKey string
	// NATSCreds is a user credentials file (a JWT and its NKey seed, as nsc writes it);
	// NATSNKey an NKey seed file. At most one; either keeps the secret out of the URL and
	// the process list. The file is read again at every (re)connect.
	NATSCreds, NATSNKey string
	// RedisTLS: a CA bundle and client certificate for a rediss:// -redis URL
	// (-redis-ca, -redis-cert, -redis-key). Zero: system roots, no client certificate.
	RedisTLS RedisTLS
	// Engine is the drainers' engine (-engine): admission writes due marks and depth counts
	// to Redis for every message only for drain.EngineClaim (and "", a stack built in code),
	// whose drainers learn of work from them; never for drain.EngineOwn.
	Engine string
}

var errNATSCredsAndNKey = errors.New("-nats-creds and -nats-nkey: give one (a credentials file holds its own NKey seed)")

// natsAuth is the NATS options of -nats-creds or -nats-nkey; an error names the flag.
func natsAuth(creds, nkey string) ([]nats.Option, error) {
	switch {
	case creds != "" && nkey != "":
		return nil, errNATSCredsAndNKey
	case creds != "":
		// Read now so a missing or unreadable file is a start-up error naming the flag, not
		// an endless reconnect loop.
		if _, err := os.ReadFile(creds); err != nil {
			return nil, fmt.Errorf("-nats-creds: %w", err)
		}
		return []nats.Option{nats.UserCredentials(creds)}, nil
	case nkey != "":
		opt, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return nil, fmt.Errorf("-nats-nkey %s: %w", nkey, err)
		}
		return []nats.Option{opt}, nil
	}
	return nil, nil
}

// Stack is the opened machinery. Close releases it.
type Stack struct {
	NATS      *nats.Conn
	JS        jetstream.JetStream
	Redis     redis.UniversalClient // *redis.Client (one server, Sentinel) or *redis.ClusterClient
	Queues    *queue.Queues
	Scheduler *queue.Scheduler
	Parking   *retry.Store
	Dead      *retry.DeadLetters
	Status    *status.Locator
	Delivered *status.DeliveredRecords // nil unless StackConfig.StatusKeep > 0
	Overrides *overrides.Store
	Current   *overrides.Watcher
	// KeyOverrides and Keys are the per-key overrides (PATCH /v1/admin/queues/{name}/keys/{key})
	// and their in-memory index; Keys.Lookup / Keys.Effective is what pacing reads.
	KeyOverrides *overrides.KeyStore
	Keys         *overrides.KeyIndex
	Limits       bucket.Store
	Degraded     *bucket.Degraded // nil when StackConfig.Limits was given
	Admitter     *admit.Admitter

	closers []func()
}

// Open connects and opens everything; on error what was opened is closed again.
func Open(ctx context.Context, c StackConfig) (s *Stack, err error) {
	log := c.Logger
	s = &Stack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var tlsOpts []nats.Option
	if c.NATSCA != "" {
		tlsOpts = append(tlsOpts, nats.RootCAs(c.NATSCA))
	}
	if c.NATSCert != "" {
		tlsOpts = append(tlsOpts, nats.ClientCert(c.NATSCert, c.NATSKey))
	}
	authOpts, err := natsAuth(c.NATSCreds, c.NATSNKey)
	if err != nil {
		return s, err
	}
	tlsOpts = append(tlsOpts, authOpts...)
	nc, err := nats.Connect(c.NATSURL, append(tlsOpts,
		nats.Name("sluice-"+c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// No reconnect buffer: a publish while disconnected must fail at once, so a 503
		// means "not stored" instead of "stored later, after the client was told no".
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn(c.Name+": NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info(c.Name+": NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
	)...)
	if err != nil {
		return s, fmt.Errorf("%s: NATS %s: %w", c.Name, redact.Text(c.NATSURL), err)
	}
	s.NATS = nc
	s.closers = append(s.closers, func() { nc.Drain() })
	if s.JS, err = jetstream.New(nc); err != nil {
		return s, fmt.Errorf("%s: JetStream: %w", c.Name, err)
	}

	if s.Redis, err = OpenRedisTLS(c.RedisURL, c.RedisPoolSize, c.RedisTLS); err != nil {
		return s, err
	}
	s.closers = append(s.closers, func() { s.Redis.Close() })

	if s.Queues, err = queue.NewQueues(s.JS, queue.Config{Replicas: c.Replicas, MaxBytes: c.QueueMaxBytes, PublishWait: c.PublishWait}); err != nil {
		return s, err
	}
	if s.Scheduler, err = queue.NewScheduler(s.Redis, queue.SchedulerConfig{
		LegacyIdempotency: c.LegacyIdempotency,
		Partitions: func(rule string) int {
			if r := c.Rules().Rule(rule); r != nil && r.Queue != nil {
				return r.Queue.Partitions
			}
			return 0
		}}); err != nil {
		return s, err
	}
	if s.Parking, err = retry.NewStore(s.JS, retry.Config{Replicas: c.Replicas, MaxBytes: c.RetryMaxBytes, RuleShare: float64(c.RetryRuleShare) / 100}); err != nil {
		return s, err
	}
	if s.Dead, err = retry.NewDeadLetters(s.JS, retry.DeadConfig{Replicas: c.Replicas, MaxBytes: c.DeadMaxBytes,
		DropOldest: c.DeadDropOldest, Registerer: c.Registry,
		Rules: retryrules.Lookup(func(name string) *rules.Rule { return c.Rules().Rule(name) })}); err != nil {
		return s, err
	}
	s.Status = &status.Locator{Rules: c.Rules, Queues: s.Queues, Scheduler: s.Scheduler, Parking: s.Parking, Dead: s.Dead}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := Retry(startCtx, s.Parking.Ensure); err != nil {
		return s, fmt.Errorf("%s: retry stream: %w", c.Name, storageHint(err, "-retry-max-bytes", c.RetryMaxBytes))
	}
	if err := Retry(startCtx, s.Dead.Ensure); err != nil {
		return s, fmt.Errorf("%s: dead-letter stream: %w", c.Name, storageHint(err, "-dead-max-bytes", c.DeadMaxBytes))
	}
	if c.StatusKeep > 0 {
		if s.Delivered, err = status.NewDeliveredRecords(nc, status.DeliveredConfig{Keep: c.StatusKeep, Max: c.StatusKeepMax, Replicas: c.Replicas}); err != nil {
			return s, err
		}
		if err := Retry(startCtx, s.Delivered.Ensure); err != nil {
			return s, fmt.Errorf("%s: delivered records (-status-keep): %w", c.Name, err)
		}
		s.Status.Delivered = s.Delivered
	}
	// Live overrides (PATCH /v1/admin/queues/{name}), pushed by a KV watch.
	err = Retry(startCtx, func(ctx context.Context) (err error) {
		s.Overrides, err = overrides.Open(ctx, s.JS, overrides.Config{Replicas: c.Replicas, Logger: log})
		return err
	})
	if err != nil {
		return s, fmt.Errorf("%s: overrides: %w", c.Name, err)
	}
	s.Current = overrides.NewWatcher(s.Overrides, overrides.WatcherConfig{Logger: log, OnChange: c.OnOverride})
	if err := s.Current.Start(startCtx); err != nil { // returns once every stored override is loaded
		return s, fmt.Errorf("%s: overrides: %w", c.Name, err)
	}
	s.closers = append(s.closers, s.Current.Stop)
	// Per-key overrides: their own bucket (one entry per key), an index fed by a KV watch,
	// and a sweeper (in every process; deletes are compare-and-set) for ended overrides
	// and those of rules that left the rules file.
	err = Retry(startCtx, func(ctx context.Context) (err error) {
		s.KeyOverrides, err = overrides.OpenKeys(ctx, s.JS, overrides.KeyConfig{Replicas: c.Replicas, Logger: log})
		return err
	})
	if err != nil {
		return s, fmt.Errorf("%s: key overrides: %w", c.Name, err)
	}
	s.Keys = overrides.NewKeyIndex(s.KeyOverrides, overrides.KeyIndexConfig{Rules: s.Current, CurrentRules: c.Rules,
		Registerer: c.Registry, Logger: log})
	if err := s.Keys.Start(startCtx); err != nil {
		return s, fmt.Errorf("%s: key overrides: %w", c.Name, err)
	}
	s.closers = append(s.closers, s.Keys.Stop)

	s.Limits = c.Limits
	if s.Limits == nil {
		primary, err := bucket.NewRedis(s.Redis, bucket.RedisConfig{Prefix: "sl:lim:"})
		if err != nil {
			return s, err
		}
		s.Degraded = bucket.NewDegraded(primary, bucket.DegradedConfig{
			Timeout: c.LimitsRedisTimeout, ProbeInterval: c.LimitsProbeEvery,
			OnChange: func(on bool, err error) {
				if c.OnDegraded != nil {
					c.OnDegraded(on)
				}
				if on {
					log.Warn(c.Name+": Redis unreachable: admission limits now decided locally (limit ÷ live ingress count)", "err", err)
				} else {
					log.Info(c.Name + ": Redis reachable again: admission limits decided in Redis")
				}
			},
		})
		s.Limits = s.Degraded
	}
	s.Admitter = &admit.Admitter{
		Queues: s.Queues, Scheduler: s.Scheduler, Limits: s.Limits, Parking: s.Parking, Logger: log,
		DueMarks: c.Engine != drain.EngineOwn,
		Redis:    &queue.AdmitPipeline{RDB: s.Redis, Scheduler: s.Scheduler, IdempotencyTTL: c.IdempotencyTTL},
		Takes:    &queue.AdmitPipeline{RDB: s.Redis, Scheduler: s.Scheduler, IdempotencyTTL: c.IdempotencyTTL},
		OutflowOf: func(r *rules.Rule) (rules.Rate, rules.Rate) {
			q := s.Effective(r).Queue
			return q.Outflow, q.TotalOutflow
		},
		CapacityOf: func(r *rules.Rule) int64 { return s.Effective(r).Queue.Capacity },
	}
	return s, nil
}

// Retry runs f with a short deadline of its own, again and again until it succeeds or
// ctx ends. Creating streams is where it matters: several processes starting at once
// against a fresh R3 cluster create the same streams concurrently, and a request that
// loses that race can go unanswered (nats-io/nats.go#949) — with one long deadline the
// process would give up instead of asking again.
func Retry(ctx context.Context, f func(context.Context) error) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || noRoom(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Effective is r with its live override applied (r itself when there is none, or when
// the override does not fit the rule any more).
func (s *Stack) Effective(r *rules.Rule) *rules.Rule {
	eff, _, _ := s.Current.Effective(r)
	return eff
}

// Ready reports whether NATS and Redis are reachable (GET /readyz); the error is a
// *httpx.BackendDown naming the backend.
func (s *Stack) Ready(ctx context.Context) error {
	if !s.NATS.IsConnected() {
		return &httpx.BackendDown{Backend: "NATS", Err: errors.New("not connected")}
	}
	if err := s.Redis.Ping(ctx).Err(); err != nil {
		return &httpx.BackendDown{Backend: "Redis", Err: err}
	}
	return nil
}

// Close releases everything Open opened, in reverse order. Safe to call twice.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// noRoom reports whether JetStream refused a stream for want of storage: asking again
// cannot help (JSStorageResourcesExceededErr, JSInsufficientResourcesErr).
func noRoom(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == 10047 || api.ErrorCode == 10023) {
		return true
	}
	return strings.Contains(err.Error(), "insufficient storage") || strings.Contains(err.Error(), "insufficient resources")
}

// storageHint names the flag that sizes a stream when JetStream has no room for it.
func storageHint(err error, flagName string, size int64) error {
	if !noRoom(err) {
		return err
	}
	return fmt.Errorf("%w: the stream reserves %s (%s %s): lower %s, or give NATS more JetStream storage (max_file_store)",
		err, FormatBytes(size), flagName, FormatBytes(size), flagName)
}

// Default stream bounds (-retry-max-bytes, -dead-max-bytes): room for a million parked
// 1 KiB messages each, and small enough that both fit the NATS Helm chart's default 10 Gi
// volume beside the queues. JetStream reserves a file stream's MaxBytes up front.
const (
	DefaultRetryMaxBytes = 1 << 30
	DefaultDeadMaxBytes  = 1 << 30
)

// CheckRuleShare checks -retry-rule-share: a percentage, 1 to 100.
func CheckRuleShare(pct int) error {
	if pct < 1 || pct > 100 {
		return fmt.Errorf("-retry-rule-share: want a percentage from 1 to 100, got %d", pct)
	}
	return nil
}

// DefaultRetryRuleShare is -retry-rule-share's default: one rule may take a quarter of the
// retry stream (retry.DefaultRuleShare).
const DefaultRetryRuleShare = 25

// CheckStreamBytes checks -retry-max-bytes and -dead-max-bytes.
func CheckStreamBytes(retry, dead int64) error {
	if retry <= 0 {
		return fmt.Errorf("-retry-max-bytes: want a positive size, got %d", retry)
	}
	if dead <= 0 {
		return fmt.Errorf("-dead-max-bytes: want a positive size, got %d", dead)
	}
	return nil
}
