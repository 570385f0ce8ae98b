package process

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/tlsx"
)

// RedisKind is the deployment a -redis URL names.
type RedisKind string

const (
	RedisSingle   RedisKind = "single"   // one server (or its unix socket): redis.NewClient
	RedisCluster  RedisKind = "cluster"  // Redis Cluster, seed nodes: redis.NewClusterClient
	RedisSentinel RedisKind = "sentinel" // a master found through Sentinel: redis.NewFailoverClient
)

// RedisURLForms documents the forms of -redis; flags and errors quote it.
const RedisURLForms = "redis://[user:pass@]host:port[/db], rediss:// (TLS), unix:///path/to.sock, " +
	"cluster: redis://host1:port?addr=host2:port&addr=host3:port (or redis+cluster://host:port for one seed), " +
	"sentinel: redis+sentinel://sentinel1:26379?master_name=NAME&addr=sentinel2:26379"

// RedisConfig is a parsed -redis URL: exactly one of Single, Cluster and Failover is set,
// as Kind says. Options are go-redis's own, parsed by go-redis (ParseURL,
// ParseClusterURL, ParseFailoverURL), with sluice's defaults filled in where the URL left
// a field unset.
type RedisConfig struct {
	Kind     RedisKind
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// ParseRedisURL parses a -redis URL into go-redis options. Which parser runs is decided by
// the scheme and by the query parameters that only one of them knows; the parsing itself is
// go-redis's (so every option go-redis reads from a URL — dial_timeout, pool_size,
// max_retries, … — works, and an unknown one is an error):
//
//   - redis://, rediss://, unix:// — one server: redis.ParseURL.
//   - redis:// or rediss:// with one or more addr= parameters — Redis Cluster, the host and
//     every addr are seed nodes: redis.ParseClusterURL. redis+cluster:// (rediss+cluster://)
//     says Cluster explicitly, for a single seed.
//   - redis+sentinel:// (rediss+sentinel://), or redis:// with master_name= — Sentinel: the
//     host and every addr are sentinels, master_name the monitored master:
//     redis.ParseFailoverURL. A password for the master is the password= parameter (the
//     URL's user:pass are the sentinels').
//
// pool is the least connection pool size (per node for a cluster); <= 0 means 256. Errors
// name the flag and never repeat a password.
func ParseRedisURL(raw string, pool int) (*RedisConfig, error) {
	fail := func(err error) (*RedisConfig, error) {
		return nil, fmt.Errorf("-redis %s: %w (want %s)", redactURL(raw), cleanRedisErr(err), RedisURLForms)
	}
	if strings.TrimSpace(raw) == "" {
		return fail(errors.New("empty URL"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fail(err)
	}
	scheme, mode, _ := strings.Cut(u.Scheme, "+")
	q := u.Query()
	kind := RedisSingle
	switch mode {
	case "":
		if q.Has("master_name") {
			kind = RedisSentinel
		} else if q.Has("addr") {
			kind = RedisCluster
		}
	case "cluster":
		kind = RedisCluster
	case "sentinel":
		kind = RedisSentinel
	default:
		return fail(fmt.Errorf("unknown scheme %q", u.Scheme))
	}
	if mode != "" {
		if scheme != "redis" && scheme != "rediss" {
			return fail(fmt.Errorf("unknown scheme %q", u.Scheme))
		}
		u.Scheme = scheme // go-redis's parsers know redis and rediss only
	}
	if kind != RedisSingle && u.Host == "" {
		return fail(errors.New("no host"))
	}
	if pool <= 0 {
		pool = 256
	}
	c := &RedisConfig{Kind: kind}
	switch kind {
	case RedisSingle:
		if c.Single, err = redis.ParseURL(u.String()); err != nil {
			return fail(err)
		}
		o := c.Single
		d := clientDefaults{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries,
			&o.DialerRetries, &o.DialerRetryTimeout, &o.PoolSize, &o.MinIdleConns}
		d.fill(pool)
		o.ContextTimeoutEnabled = true
	case RedisCluster:
		if c.Cluster, err = redis.ParseClusterURL(u.String()); err != nil {
			return fail(err)
		}
		if u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return fail(errors.New("Redis Cluster has only database 0"))
		}
		o := c.Cluster
		d := clientDefaults{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries,
			&o.DialerRetries, &o.DialerRetryTimeout, &o.PoolSize, &o.MinIdleConns}
		d.fill(pool)
		o.ContextTimeoutEnabled = true
		// go-redis reloads the slot map on MOVED, or once it is older than this (default
		// 60 s, and not settable from a URL). A master that dies answers no MOVED: its
		// clients kept sending its slots' commands to the dead address for the whole
		// minute after its replica took over (TestRedisFailover/each/ClusterMasterKilled).
		// One CLUSTER SLOTS a second per process bounds that by a second.
		if o.ClusterStateReloadInterval == 0 {
			o.ClusterStateReloadInterval = ClusterStateReloadInterval
		}
		// A command the cluster client retries (a dead node refuses the dial; up to
		// MaxRedirects attempts) waits 10 ms–1 s between attempts by default. A claim
		// carries the drainer's clock: run that late, it hands out a slot already past,
		// whose delivery then comes less than one interval before the next slot — every
		// key got two deliveries ~8 ms apart at 20/s when the client resumed after a
		// master's failover (3 of 4 runs; 0 of 5 without the backoff). Without it a
		// retry is immediate and a failing claim fails fast; the drainer asks again.
		if o.MinRetryBackoff == 0 {
			o.MinRetryBackoff = -1
		}
	case RedisSentinel:
		if c.Failover, err = redis.ParseFailoverURL(u.String()); err != nil {
			return fail(err)
		}
		o := c.Failover
		if o.MasterName == "" {
			return fail(errors.New("sentinel URL without master_name"))
		}
		d := clientDefaults{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries,
			&o.DialerRetries, &o.DialerRetryTimeout, &o.PoolSize, &o.MinIdleConns}
		d.fill(pool)
		o.ContextTimeoutEnabled = true
	}
	return c, nil
}

// NewClient returns the client for c: a *redis.Client (one server, or the master Sentinel
// names, followed across failovers) or a *redis.ClusterClient.
func (c *RedisConfig) NewClient() redis.UniversalClient {
	switch c.Kind {
	case RedisCluster:
		cc := redis.NewClusterClient(c.Cluster)
		cc.AddHook(reloadOnNodeFailure{cc})
		return cc
	case RedisSentinel:
		return redis.NewFailoverClient(c.Failover)
	default:
		return redis.NewClient(c.Single)
	}
}

// reloadOnNodeFailure makes a cluster client read the slot map again as soon as a command
// could not reach its node or the cluster said it is down, instead of within
// ClusterStateReloadInterval: after a master's failover its slots' commands go to the
// promoted replica as soon as the cluster names it. go-redis coalesces the reloads (one at
// a time, 200 ms apart), so a dead node costs a few CLUSTER SLOTS a second, not one per
// command.
type reloadOnNodeFailure struct{ c *redis.ClusterClient }

func (h reloadOnNodeFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNodeFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if nodeFailed(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnNodeFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			for _, c := range cmds {
				if nodeFailed(c.Err()) {
					h.c.ReloadState(ctx)
					break
				}
			}
		}
		return err
	}
}

// nodeFailed: err says the node was unreachable (refused, reset, timed out) or the
// cluster is down for its slot — not a command's own error, nor the caller giving up.
func nodeFailed(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	return redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "TRYAGAIN")
}

// OpenRedis parses a -redis URL and returns its client (see ParseRedisURL). It does not
// connect: the first command does.
func OpenRedis(raw string, pool int) (redis.UniversalClient, error) {
	return OpenRedisTLS(raw, pool, RedisTLS{})
}

// RedisTLS names the files of TLS to Redis: -redis-ca (a PEM CA bundle trusted instead of
// the system roots) and -redis-cert with -redis-key (a client certificate, for servers
// with tls-auth-clients). go-redis's URLs say only whether to use TLS (rediss://) and
// skip_verify; these fill in its TLSConfig. Empty fields are off.
type RedisTLS struct {
	CA, Cert, Key string
}

// CheckRedisTLS validates the TLS flags of a -redis URL: -redis-cert and -redis-key come
// together, and any of them needs a TLS URL (rediss://, rediss+cluster://,
// rediss+sentinel://) — a file given for a plain-text connection would be silently unused.
func CheckRedisTLS(raw, ca, cert, key string) error {
	switch {
	case (cert == "") != (key == ""):
		return errors.New("-redis-cert and -redis-key: give both or neither")
	case ca == "" && cert == "":
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(u.Scheme, "rediss") {
		flag := "-redis-ca"
		if ca == "" {
			flag = "-redis-cert"
		}
		return fmt.Errorf("%s: needs a TLS -redis URL (rediss://…), got %s", flag, redactURL(raw))
	}
	return nil
}

// OpenRedisTLS is OpenRedis with the TLS files t applied to the URL's TLS configuration
// (every node's, for a cluster; the sentinels' and the master's, for Sentinel). Errors
// name the flag of the file at fault.
func OpenRedisTLS(raw string, pool int, t RedisTLS) (redis.UniversalClient, error) {
	c, err := ParseRedisURL(raw, pool)
	if err != nil {
		return nil, err
	}
	if err := CheckRedisTLS(raw, t.CA, t.Cert, t.Key); err != nil {
		return nil, err
	}
	var cfg *tls.Config
	switch c.Kind {
	case RedisCluster:
		cfg = c.Cluster.TLSConfig
	case RedisSentinel:
		cfg = c.Failover.TLSConfig
	default:
		cfg = c.Single.TLSConfig
	}
	if cfg != nil { // rediss: go-redis made it with the host as ServerName
		if err := (tlsx.ClientFiles{Flag: "-redis", CAFile: t.CA, CertFile: t.Cert, KeyFile: t.Key}).Configure(cfg); err != nil {
			return nil, err
		}
	}
	return c.NewClient(), nil
}

// ClusterStateReloadInterval is how old a cluster client's slot map may get before it is
// read again (go-redis's default is 60 s).
const ClusterStateReloadInterval = time.Second

// clientDefaults points at the option fields sluice sets when the URL did not. The
// timeouts are short so that an unreachable Redis degrades admission and pauses drainers
// quickly instead of hanging.
type clientDefaults struct {
	dial, read, write     *time.Duration
	maxRetries            *int
	dialerRetries         *int
	dialerRetryTimeout    *time.Duration
	poolSize, minIdleConn *int
}

func (d clientDefaults) fill(pool int) {
	for _, p := range []*time.Duration{d.dial, d.read, d.write} {
		if *p == 0 {
			*p = 500 * time.Millisecond
		}
	}
	if *d.maxRetries == 0 {
		*d.maxRetries = 1
	}
	// go-redis retries a refused dial 5 times, 100 ms apart, by default: ~0.8 s per command
	// while Redis is down. One quick dial is enough; the callers have their own fallbacks.
	if *d.dialerRetries == 0 {
		*d.dialerRetries = 1
	}
	if *d.dialerRetryTimeout == 0 {
		*d.dialerRetryTimeout = 10 * time.Millisecond
	}
	*d.poolSize = max(*d.poolSize, pool)
	if *d.minIdleConn == 0 {
		*d.minIdleConn = 8
	}
}

// redactURL is raw as redact.URL shows it (password, user token and query string masked),
// quoted.
func redactURL(raw string) string { return fmt.Sprintf("%q", redact.URL(raw)) }

// cleanRedisErr drops the "redis: " prefix of go-redis's parse errors and the URL a
// *url.Error repeats (it may hold a password).
func cleanRedisErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	if s, ok := strings.CutPrefix(err.Error(), "redis: "); ok {
		return errors.New(s)
	}
	return err
}
