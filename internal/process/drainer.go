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

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
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

// DrainerConfig is everything the drainer process is told from outside: the Settings it
// shares with the ingress, and the lease and ownership settings only a drainer has. Every
// field is a flag with a SLUICE_* environment variable (the flag wins); defaults are in
// drainerFlags (and Settings.Declare) and docs/configuration.md's table.
type DrainerConfig struct {
	Settings

	Lease         time.Duration // -lease: default 2.5s, at least 500ms
	LeaseRenew    time.Duration // -lease-renew: default 0s = Lease/3; at most Lease/2
	OwnPartitions int           // -own-partitions: ownership partitions per rule (engine own); default 16
	OwnLease      time.Duration // -own-lease: ownership lease (engine own); default 1.5s
	RepairEvery   time.Duration // -repair-every: stream listing for unnoticed keys (engine own); default 30s
}

func drainerFlags(c *DrainerConfig, getenv func(string) string, stderr io.Writer) *FlagSet {
	f := NewFlagSet("drainer", getenv, stderr)
	c.Settings.Declare(f, RoleDrainer)
	f.Duration(&c.Lease, "lease", "SLUICE_LEASE", 2500*time.Millisecond, "claim lease: a dead drainer's keys are claimed again within it")
	f.Duration(&c.LeaseRenew, "lease-renew", "SLUICE_LEASE_RENEW", 0, "renewal period of held leases, at most lease/2; 0s = lease/3")
	f.Int(&c.OwnPartitions, "own-partitions", "SLUICE_OWN_PARTITIONS", 16, "engine own: ownership partitions per rule, the unit drainers share")
	f.Duration(&c.OwnLease, "own-lease", "SLUICE_OWN_LEASE", 1500*time.Millisecond, "engine own: ownership lease, renewed every third of it; a dead drainer's partitions are owned again within lease + lease/3")
	f.Duration(&c.RepairEvery, "repair-every", "SLUICE_REPAIR_EVERY", 30*time.Second, "engine own: how often each rule's stream is listed for keys with messages no notice announced (the longest such a key waits)")
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

// Validate checks the config (the shared Settings, then the drainer's own); an error
// names the flag and its bad value.
func (c *DrainerConfig) Validate() error {
	if err := c.Settings.Validate(RoleDrainer, true); err != nil {
		return err
	}
	switch {
	case c.Lease < 500*time.Millisecond:
		return fmt.Errorf("-lease: want a duration of at least 500ms, got %s", c.Lease)
	case c.LeaseRenew < 0 || c.LeaseRenew > c.Lease/2:
		return fmt.Errorf("-lease-renew: want 0s (lease/3) or a positive duration of at most -lease/2 (%s), got %s", c.Lease/2, c.LeaseRenew)
	case c.OwnPartitions < 1 || c.OwnPartitions > 256:
		return fmt.Errorf("-own-partitions: want a number in [1, 256], got %d", c.OwnPartitions)
	case c.OwnLease < 300*time.Millisecond:
		return fmt.Errorf("-own-lease: want a duration of at least 300ms, got %s", c.OwnLease)
	case c.RepairEvery <= 0:
		return fmt.Errorf("-repair-every: want a positive duration, got %s", c.RepairEvery)
	}
	return nil
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

	tlsSrv, sinkTLS, signer, err := c.OpenTLS(log, reg)
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

	sc := c.StackConfig("drainer")
	sc.Registry, sc.Rules, sc.Logger, sc.RedisPoolSize = reg, watcher.Current, log, 2*c.Workers+16
	st, err := Open(ctx, sc)
	if err != nil {
		return err
	}
	m.Stack = st
	m.closers = append(m.closers, st.Close)
	deps := c.DrainDeps(sinkTLS, signer)
	deps.Stack, deps.Rules, deps.Logger, deps.Registerer = st, watcher.Current, log, reg
	deps.Drain.Lease, deps.Drain.LeaseRenew = c.Lease, c.LeaseRenew
	deps.Drain.OwnPartitions, deps.Drain.OwnLease, deps.Drain.RepairEvery = c.OwnPartitions, c.OwnLease, c.RepairEvery
	proc, err := StartDraining(bg, deps)
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
