package ingress

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

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/admin"
	"github.com/sluice-io/sluice/internal/audit"
	"github.com/sluice-io/sluice/internal/decide"
	svc "github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/retire"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/queue"
)

// Run is the ingress binary: flags, -version, -check-config, or the process until
// ctx ends, then a soft stop.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	switch {
	case cfg.Version:
		fmt.Fprintln(stdout, "ingress", process.Version())
		return nil
	case len(cfg.CheckConfig) > 0:
		if err := rules.CheckConfigWith(stdout, rules.Options{MergeDomains: cfg.MergeDomainConfig}, cfg.CheckConfig...); err != nil {
			return fmt.Errorf("%w: %w: %w", process.ErrReported, process.ErrUsage, err) // CheckConfigWith wrote it
		}
		return nil
	}
	stopTracing, err := telemetry.Setup(ctx, "sluice-ingress", getenv) // off unless OTEL_* says otherwise
	if err != nil {
		return err
	}
	defer stopTracing(context.WithoutCancel(ctx))
	m := &Main{Config: cfg, Logger: process.NewLogger(cfg.LogFormat, cfg.LogLevel, stderr)}
	if err := m.Run(ctx); err != nil {
		return err
	}
	return process.WaitForStop(ctx, m.Logger, "ingress", cfg.ShutdownTimeout, m.Close)
}

// Main is the ingress process: it runs in cmd/ingress, inside `sluice dev`, and
// whole in tests.
type Main struct {
	Config Config
	Logger *slog.Logger // default: built from the config, on stderr
	// Now is the clock of admissions and checks; default time.Now. Tests freeze it to
	// compare answers that depend on time.
	Now func() time.Time

	// Limits decides admission limits and checks; nil = Redis (degrading to a local
	// limiter while Redis is unreachable). `sluice dev` sets an in-memory store.
	Limits bucket.Store
	// SinkDial, when set, dials the connections of the in-process drainer's HTTP sink
	// deliveries (`sluice dev` sends the example rules' sink addresses to its demo sink).
	SinkDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TokensChecked, when set, is called each time the token files have been looked at
	// (every second): tests wait on it rather than sleep.
	TokensChecked func()

	// Set by Run.
	Server    *svc.Server
	Addr      net.Addr          // the HTTP listener's address (useful with -http :0)
	GRPCAddr  net.Addr          // the gRPC listener's address; nil when -grpc is empty
	DebugAddr net.Addr          // the pprof listener's address; nil without -debug-addr
	NATSURL   string            // Config.NATSURL
	RedisURL  string            // Config.RedisURL
	Drainer   *process.Draining // the in-process drainer (-drain), or nil
	Stack     *process.Stack    // connections, streams, admission
	TLS       *tlsx.Server      // the listeners' certificates (-tls-cert); nil = plain text
	Rules     func() *rules.Set // the rules in force

	closers []func()
	httpSrv *http.Server
	grpcSrv *decide.GRPCServer
	once    sync.Once
}

// withDefaults fills what a config built by hand (not by ParseFlags) left zero.
func (c Config) withDefaults() Config {
	var d Config
	declareFlags(&d, func(string) string { return "" }, io.Discard)
	for _, f := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.RulesPoll, d.RulesPoll}, {&c.ShutdownTimeout, d.ShutdownTimeout}, {&c.ReadHeaderTimeout, d.ReadHeaderTimeout},
		{&c.MaxDelay, d.MaxDelay}, {&c.IdempotencyTTL, d.IdempotencyTTL}, {&c.AuditKeep, d.AuditKeep}, {&c.ReadmitMaxBackoff, d.ReadmitMaxBackoff},
		{&c.LimitsRedisTimeout, d.LimitsRedisTimeout}, {&c.LimitsProbeEvery, d.LimitsProbeEvery}} {
		if *f.p == 0 {
			*f.p = f.v
		}
	}
	for _, f := range []struct {
		p *int64
		v int64
	}{{&c.MaxBody, d.MaxBody}, {&c.RetryMaxBytes, d.RetryMaxBytes}, {&c.DeadMaxBytes, d.DeadMaxBytes}, {&c.StatusKeepMax, d.StatusKeepMax}, {&c.AuditMax, d.AuditMax}} {
		if *f.p == 0 {
			*f.p = f.v
		}
	}
	for _, f := range []struct {
		p *int
		v int
	}{{&c.Replicas, d.Replicas}, {&c.MaxBatch, d.MaxBatch}, {&c.Workers, d.Workers}} {
		if *f.p == 0 {
			*f.p = f.v
		}
	}
	if c.Engine == "" {
		c.Engine = d.Engine
	}
	return c
}

// Run starts everything and returns once the listeners listen. ctx bounds the start only;
// stop the process with Close.
func (m *Main) Run(ctx context.Context) (err error) {
	c := m.Config.withDefaults()
	m.Config = c
	m.NATSURL, m.RedisURL = c.NATSURL, c.RedisURL
	if m.Logger == nil {
		m.Logger = process.NewLogger(c.LogFormat, c.LogLevel, os.Stderr)
	}
	log := m.Logger
	defer func() {
		if err != nil {
			m.Close()
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Certificates and secrets first: a process that cannot serve as configured must not
	// start.
	tlsSrv, sinkTLS, signer, err := c.OpenTLS(log, reg)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	m.TLS = tlsSrv
	auth, err := svc.OpenAuth(svc.AuthFiles{AdminToken: c.AdminToken, AdminTokenFile: c.AdminTokenFile,
		AdminTokensFile: c.AdminTokensFile, SubmitTokensFile: c.SubmitTokensFile}, log)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	reg.MustRegister(auth)
	// The token files are looked at every second (TokenFile): a revoked token stops working
	// within it, and a broken file is reported at once.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	m.closers = append(m.closers, stopWatch)
	go auth.Watch(watchCtx, m.TokensChecked)

	// Rules next: a process with bad rules must not start.
	var srv *svc.Server
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
	m.Rules = watcher.Current

	capacityChanged := make(chan struct{}, 1)
	sc := c.StackConfig("ingress")
	sc.Rules, sc.Limits, sc.Logger, sc.Registry = watcher.Current, m.Limits, log, reg
	sc.IdempotencyTTL, sc.LegacyIdempotency = c.IdempotencyTTL, c.LegacyIdempotencyKeys
	sc.RetryRuleShare, sc.QueueMaxBytes, sc.PublishWait = c.RetryRuleShare, queueMaxBytes(c.QueueMaxBytes), c.PublishWait
	sc.OnDegraded = func(on bool) {
		if srv != nil {
			srv.SetDegraded(on)
		}
	}
	// An override changed: re-apply effective capacities to the streams.
	sc.OnOverride = func(string) {
		select {
		case capacityChanged <- struct{}{}:
		default:
		}
	}
	st, err := process.Open(ctx, sc)
	if err != nil {
		return err
	}
	m.closers = append(m.closers, st.Close)
	m.Stack = st
	// What status lookups cost the queue store: a steep rise with few lookups is someone
	// probing with made-up ids (each bounded by status.DefaultMaxRead per look).
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_status_messages_read_total",
		Help: "Messages of keys' queues read by GET /v1/messages/{id} and cancels (at most 1000 per look, two looks per lookup).",
	}, func() float64 { return float64(st.Status.MessagesRead()) }))

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
	if err := process.Retry(actx, auditLog.Ensure); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	adminAPI := &admin.Admin{Audit: auditLog, Caller: svc.Caller, Rules: watcher.Current, Overrides: st.Overrides, Current: st.Current, Keys: st.Keys, Queues: st.Queues, Scheduler: st.Scheduler,
		JS: st.JS, Parking: st.Parking, Dead: st.Dead, Admitter: st.Admitter, Logger: log}
	srv = svc.NewServer(svc.ServerConfig{
		Rules: watcher.Current, Admitter: st.Admitter, Status: st.Status, Limits: st.Limits,
		Admin: adminAPI, Auth: auth, Audit: auditLog, MaxBody: c.MaxBody, MaxBatch: c.MaxBatch, MaxDelay: c.MaxDelay, Registry: reg, Logger: log,
		Ready: st.Ready, GRPCResponseHeaders: c.GRPCResponseHeaders, Now: m.Now,
		CheckClientNames: c.CheckClientNames, OverrideMaxFactor: c.OverrideMaxFactor, OverrideMaxWindow: c.OverrideMaxWindow,
		Envoy: decide.EnvoyConfig{ShadowMode: c.ShadowMode, QuotaMode: c.QuotaMode, ResponseDynamicMetadata: c.ResponseDynamicMetadata,
			LocalCacheBytes: c.LocalCacheBytes, DetailedMetricValues: c.DetailedMetricValues},
	})
	m.Server = srv
	srv.RulesReloaded(watcher.Current(), nil)

	if c.Drain {
		deps := c.DrainDeps(sinkTLS, signer)
		deps.Stack, deps.Rules, deps.Logger, deps.Registerer, deps.SinkDial = st, watcher.Current, log, reg, m.SinkDial
		proc, err := process.StartDraining(context.WithoutCancel(ctx), deps)
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
	retirer := &retire.Retirer{Queues: st.Queues, Parking: st.Parking, Dead: st.Dead, Overrides: st.Overrides, Scheduler: st.Scheduler, Logger: log}
	retirer.Register(reg)
	m.reportOrphans(startCtx, watcher.Current())
	go m.followRules(wctx, watcher.Current, capacityChanged, retirer)
	go srv.FlushRefusals(wctx, st.Scheduler, time.Second)
	if st.Degraded != nil {
		if err := svc.CountPeers(wctx, st.NATS, log, st.Degraded.SetProcesses); err != nil {
			log.Warn("ingress: live ingress count unavailable; degraded limits assume 1 process", "err", err)
		}
	}

	ln, err := process.Listen("http", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	m.Addr = ln.Addr()
	m.httpSrv = process.NewHTTPServer(srv, log, c.ReadHeaderTimeout)
	process.Serve(m.httpSrv, ln, m.TLS, log, "ingress")
	if c.GRPCAddr != "" {
		gln, err := process.Listen("grpc", c.GRPCAddr)
		if err != nil {
			return fmt.Errorf("ingress: %w", err)
		}
		m.GRPCAddr = gln.Addr()
		gc := decide.GRPCConfig{MaxRecvMsgSize: int(min(c.MaxBody, 1<<30)), Logger: log, Reflection: c.GRPCReflection}
		if m.TLS != nil {
			gc.TLS = m.TLS.Config()
		}
		m.grpcSrv = srv.Checks().NewGRPCServer(gc)
		go func() {
			if err := m.grpcSrv.Serve(gln); err != nil {
				log.Error("ingress: gRPC server stopped", "err", err)
			}
		}()
		log.Info("ingress: envoy rate limit service listening (gRPC)", "addr", m.GRPCAddr.String())
	}
	if c.DebugAddr != "" {
		addr, stop, err := process.ServeDebug(c.DebugAddr, log, "ingress")
		if err != nil {
			return fmt.Errorf("ingress: %w", err)
		}
		m.DebugAddr = addr
		m.closers = append(m.closers, stop)
	}
	log.Info("ingress: listening", "addr", m.Addr.String(), "tls", m.TLS != nil, "mtls", c.TLSClientCA != "", "nats", c.NATSURL,
		"rules", len(watcher.Current().Rules()), "drain", c.Drain, "version", process.Version())
	return nil
}

// followRules keeps the queue streams in step with the rules and the overrides until ctx
// ends: a new queue rule gets its stream, a capacity change reaches its stream, and a
// removed queue rule is retired (its waiting messages become dead letters, its override
// and stream are deleted; see package retire).
func (m *Main) followRules(ctx context.Context, current func() *rules.Set, capacityChanged <-chan struct{}, retirer *retire.Retirer) {
	last := current()
	seen := last         // the rules whose removed queue rules were retired
	var pending []string // removed rules whose retirement failed: tried again each tick
	t := time.NewTicker(m.Config.RulesPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-capacityChanged:
			last = nil // an override changed: re-apply effective capacities
		}
		cur := current()
		if cur != last {
			ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := ensureStreams(ectx, m.Stack.Queues, cur, m.Stack.Effective); err != nil {
				m.Logger.Error("ingress: streams not updated after a rules or override change", "err", err)
			} else {
				last = cur
			}
			cancel()
		}
		if cur != seen {
			pending = append(pending, retire.Removed(seen, cur)...)
			seen = cur
		}
		var failed []string
		for _, name := range pending {
			if cur.Rule(name) != nil && cur.Rule(name).HasQueue() {
				continue // added back before it could be retired: nothing to do
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			if _, err := retirer.Rule(rctx, name); err != nil {
				m.Logger.Error("ingress: a removed rule's messages not all made dead letters yet; trying again", "rule", name, "err", err)
				failed = append(failed, name)
			}
			cancel()
		}
		pending = failed
	}
}

// reportOrphans logs, at start, the queue streams and overrides that belong to no queue
// rule: rules removed while no ingress ran, whose messages nobody delivers. They are left as they are
// (a process started with the wrong rules file must not dead-letter every queue): add the
// rule back to deliver them, or add it back and remove it again to make them dead letters.
func (m *Main) reportOrphans(ctx context.Context, set *rules.Set) {
	orphans, err := retire.Orphans(ctx, m.Stack.JS, m.Stack.Queues, set)
	if err != nil {
		m.Logger.Warn("ingress: could not look for queue streams of removed rules", "err", err)
		return
	}
	for stream, msgs := range orphans {
		m.Logger.Warn("ingress: a queue stream belongs to no queue rule (its rule was removed while no ingress ran); its messages wait undelivered: add the rule back to deliver them, or add it back and remove it to make them dead letters",
			"stream", stream, "messages", msgs)
	}
	all, err := m.Stack.Overrides.All(ctx)
	if err != nil {
		m.Logger.Warn("ingress: could not look for overrides of removed rules", "err", err)
		return
	}
	for name, o := range all {
		if r := set.Rule(name); r == nil || !r.HasQueue() {
			m.Logger.Warn("ingress: a live override belongs to no queue rule (its rule was removed while no ingress ran); it applies again if the rule comes back: add it back and remove it, or reset it (sluice tune NAME --reset) once it is back",
				"rule", name, "override", o)
		}
	}
}

// Close stops the process softly: both listeners stop taking new work and finish
// in-flight requests within -shutdown-timeout, then the in-process drainer and
// everything else stop in reverse start order. Safe to call twice.
func (m *Main) Close() {
	m.once.Do(func() {
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
	})
}

// ensureStreams creates or updates the stream of every queue rule at its effective capacity.
func ensureStreams(ctx context.Context, q *queue.Queues, set *rules.Set, effective func(*rules.Rule) *rules.Rule) error {
	for _, r := range set.QueueRules() {
		eq := effective(r).Queue
		err := process.Retry(ctx, func(ctx context.Context) error {
			return q.EnsureLimits(ctx, r.Name, queue.Limits{Capacity: eq.Capacity, MaxBytes: eq.MaxBytes})
		})
		if err != nil {
			return fmt.Errorf("ingress: %w", err)
		}
	}
	return nil
}

// queueMaxBytes maps -queue-max-bytes to the queue streams' limit: 0 asks for none of their
// own (JetStream's -1), which queue.Config would read as "the default".
func queueMaxBytes(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}
