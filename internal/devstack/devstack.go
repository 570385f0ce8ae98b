package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/devenv"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/rules"
)

// DefaultSinkAddr is where the example rules' sinks point and where the demo sink listens
// unless told otherwise.
const DefaultSinkAddr = "127.0.0.1:8090"

// Config is what `sluice dev` is told. Every field is a flag with a SLUICE_DEV_*
// environment variable (the flag wins); defaults in devFlags and docs/configuration.md's table.
type Config struct {
	Rules           []string      // -rules: default "deploy/examples"
	DataDir         string        // -data: the embedded NATS server's JetStream store; default "./data"
	HTTPAddr        string        // -http: the API; default ":8080"
	GRPCAddr        string        // -grpc: envoy's rate limit service; default ":8081"; empty disables
	NATSAddr        string        // -nats-addr: the embedded NATS server; default "127.0.0.1:4222" (port 0: any)
	SinkAddr        string        // -sink-addr: the demo sink; default "127.0.0.1:8090" (port 0: any)
	AdminToken      string        // -admin-token: bearer token of the admin API and the console; default empty
	StatusKeep      time.Duration // -status-keep: default 1h, so GET /v1/messages/{id} answers "delivered"
	RulesPoll       time.Duration // -rules-poll: default 1s
	ShutdownTimeout time.Duration // -shutdown-timeout: default 10s
	LogLevel        string        // -log-level: default info (text logs)
	// SinkFail is -sink-fail: faults of the demo sink, "path=/orders,status=503,share=0.3",
	// several separated by ";"; default none. ParseFlags reads them into SinkFaults.
	SinkFail   string
	SinkFaults []devenv.Fault
}

func devFlags(c *Config, getenv func(string) string, stderr io.Writer) *process.FlagSet {
	f := process.NewFlagSet("sluice dev", getenv, stderr)
	f.List(&c.Rules, "rules", "SLUICE_DEV_RULES", "deploy/examples", "rules files or directories, comma-separated")
	f.String(&c.DataDir, "data", "SLUICE_DEV_DATA", "./data", "JetStream store directory of the embedded NATS server")
	f.String(&c.HTTPAddr, "http", "SLUICE_DEV_HTTP_ADDR", ":8080", "HTTP API listen address (also the console at /ui/)")
	f.String(&c.GRPCAddr, "grpc", "SLUICE_DEV_GRPC_ADDR", ":8081", "envoy rate limit service (gRPC) listen address; empty disables")
	f.String(&c.NATSAddr, "nats-addr", "SLUICE_DEV_NATS_ADDR", "127.0.0.1:4222", "listen address of the embedded NATS server (port 0: any)")
	f.String(&c.SinkAddr, "sink-addr", "SLUICE_DEV_SINK_ADDR", DefaultSinkAddr, "listen address of the demo sink (port 0: any); the example rules reach it wherever it is")
	f.String(&c.AdminToken, "admin-token", "SLUICE_DEV_ADMIN_TOKEN", "", "bearer token of the admin API and the console")
	f.Duration(&c.StatusKeep, "status-keep", "SLUICE_DEV_STATUS_KEEP", time.Hour, "keep a record of each delivered message this long; 0s = off")
	f.Duration(&c.RulesPoll, "rules-poll", "SLUICE_DEV_RULES_POLL", time.Second, "how often rules files are checked for changes")
	f.Duration(&c.ShutdownTimeout, "shutdown-timeout", "SLUICE_DEV_SHUTDOWN_TIMEOUT", 10*time.Second, "on Ctrl-C: time to finish in-flight work")
	f.String(&c.LogLevel, "log-level", "SLUICE_DEV_LOG_LEVEL", "info", "debug, info, warn or error")
	f.String(&c.SinkFail, "sink-fail", "SLUICE_DEV_SINK_FAIL", "", "make the demo sink fail a share of deliveries: 'path=/orders,status=503,share=0.3' (also rule=, key=, retry_after=, delay=; several separated by ';'); change it at run time with POST /_demo/fail on the sink")
	return f
}

// Flags lists `sluice dev`'s flags with their environment variables and defaults.
func Flags() []process.Flag {
	var c Config
	return devFlags(&c, func(string) string { return "" }, io.Discard).Flags()
}

// ParseFlags reads args (after "dev") and the environment into a Config.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	if err := devFlags(&c, getenv, stderr).Parse(args); err != nil {
		return c, process.UsageError(err)
	}
	switch {
	case len(c.Rules) == 0:
		return c, process.UsageError(errors.New("-rules: want a rules file or directory"))
	case c.StatusKeep < 0:
		return c, process.UsageError(fmt.Errorf("-status-keep: want 0s (off) or a positive duration, got %s", c.StatusKeep))
	case c.RulesPoll <= 0:
		return c, process.UsageError(fmt.Errorf("-rules-poll: want a positive duration, got %s", c.RulesPoll))
	case c.ShutdownTimeout <= 0:
		return c, process.UsageError(fmt.Errorf("-shutdown-timeout: want a positive duration, got %s", c.ShutdownTimeout))
	}
	faults, err := devenv.ParseFaults(c.SinkFail)
	if err != nil {
		return c, process.UsageError(fmt.Errorf("-sink-fail: %w", err))
	}
	c.SinkFaults = faults
	return c, process.UsageError(process.CheckLog("text", c.LogLevel))
}

// Run is `sluice dev ARGS`: it starts the stack, prints where everything is on stdout,
// logs (text) on stderr, and runs until ctx ends.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := process.NewLogger("text", c.LogLevel, stderr)
	s, err := Start(ctx, c, log)
	if err != nil {
		return err
	}
	s.PrintBanner(stdout)
	<-ctx.Done()
	log.Info("sluice dev: shutting down (Ctrl-C again to stop at once)")
	s.Close()
	return nil
}

// Stack is a running dev stack.
type Stack struct {
	Config  Config
	Ingress *ingress.Main // with its in-process drainer
	NATSURL string        // the embedded NATS server
	SinkURL string        // the demo sink, "http://127.0.0.1:8090"
	Sink    *devenv.Sink

	closers []func()
}

// Start starts the embedded servers, the demo sink and the ingress with its drainer. It
// returns once all listen; stop it with Close.
func Start(ctx context.Context, c Config, log *slog.Logger) (_ *Stack, err error) {
	s := &Stack{Config: c}
	defer func() {
		if err != nil {
			s.Close() // what started, in reverse
		}
	}()
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("-data: %w", err)
	}
	// One embedded NATS server per JetStream store: a second `sluice dev` on the same
	// directory (with other ports) fails here rather than share it. Released last.
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, unlock)
	ns, err := devenv.StartNATS(c.DataDir, c.NATSAddr)
	if err != nil {
		return nil, fmt.Errorf("-nats-addr %s: %w", c.NATSAddr, err)
	}
	s.closers = append(s.closers, ns.Close)
	rs, err := devenv.StartRedis()
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, rs.Close)
	sink, err := devenv.StartSink(c.SinkAddr, log)
	if err != nil {
		return nil, fmt.Errorf("-sink-addr %s: %w", c.SinkAddr, err)
	}
	s.closers = append(s.closers, func() { sink.Close(context.Background()) })
	for _, f := range c.SinkFaults {
		if err := sink.SetFault(f); err != nil {
			return nil, fmt.Errorf("-sink-fail: %w", err)
		}
		log.Info("demo sink: fault set", "fault", f.String())
	}
	s.NATSURL, s.SinkURL, s.Sink = ns.URL(), sink.URL(), sink

	s.Ingress = &ingress.Main{
		Config: ingress.Config{
			Settings: process.Settings{
				Rules: c.Rules, HTTPAddr: c.HTTPAddr, NATSURL: ns.URL(), RedisURL: rs.URL(),
				StatusKeep: c.StatusKeep, RulesPoll: c.RulesPoll, ShutdownTimeout: c.ShutdownTimeout,
				LogFormat: "text", LogLevel: c.LogLevel,
			},
			GRPCAddr: c.GRPCAddr, AdminToken: c.AdminToken, Drain: true,
			GRPCReflection: true, // grpcurl against a dev stack needs no protos
		},
		Logger:   log,
		Limits:   bucket.NewMemory(bucket.MemoryConfig{}), // one process needs no shared counters
		SinkDial: sinkDial(sink.Addr()),
	}
	if err := s.Ingress.Run(ctx); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Ingress.Close)
	return s, nil
}

// sinkDial dials the demo sink for the example rules' sink address (port 8090 on the
// loopback interface) and the network for every other.
func sinkDial(sink string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	_, defPort, _ := net.SplitHostPort(DefaultSinkAddr)
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil && port == defPort && isLoopback(host) {
			addr = sink
		}
		return d.DialContext(ctx, network, addr)
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close stops the ingress and its drainer, the sink and the embedded servers. Safe to
// call twice.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// PrintBanner writes where everything listens and a first thing to try.
func (s *Stack) PrintBanner(w io.Writer) {
	m := s.Ingress
	port := strconv.Itoa(m.Addr.(*net.TCPAddr).Port)
	fmt.Fprintf(w, "\nsluice dev is running (embedded NATS at %s, data in %s)\n", s.NATSURL, s.Config.DataDir)
	fmt.Fprintf(w, "  API:       http://localhost:%s   (metrics: /metrics)\n", port)
	if s.Config.AdminToken != "" {
		fmt.Fprintf(w, "  console:   http://localhost:%s/ui/   (sign in with the admin token)\n", port)
	} else {
		fmt.Fprintf(w, "  console:   http://localhost:%s/ui/   (start with -admin-token to sign in)\n", port)
	}
	if m.GRPCAddr != nil {
		fmt.Fprintf(w, "  envoy RLS: localhost:%d (gRPC, envoy.service.ratelimit.v3.RateLimitService)\n", m.GRPCAddr.(*net.TCPAddr).Port)
	}
	fmt.Fprintf(w, "  demo sink: %s (logs every delivery; rules sending to http://%s reach it)\n", s.SinkURL, DefaultSinkAddr)
	if len(s.Config.SinkFaults) > 0 {
		var fs []string
		for _, f := range s.Config.SinkFaults {
			fs = append(fs, f.String())
		}
		fmt.Fprintf(w, "             failing: %s\n", strings.Join(fs, "; "))
	}
	fmt.Fprintf(w, "             make it fail: curl -s %s/_demo/fail -d 'path=/orders,status=503,share=0.3'  (curl -X DELETE to stop)\n", s.SinkURL)
	set := m.Rules()
	fmt.Fprintf(w, "  rules:     %d from %s\n\n", len(set.Rules()), strings.Join(s.Config.Rules, ","))
	if _, ok := anyQueueDomain(set, "orders"); ok {
		fmt.Fprintf(w, "Try it — 30 orders for one merchant, delivered at its outflow:\n")
		fmt.Fprintf(w, "  for i in $(seq 30); do curl -s localhost:%s/v1/messages -H 'Content-Type: application/json' \\\n", port)
		fmt.Fprintf(w, "    -d '{\"domain\":\"orders\",\"descriptor\":[{\"key\":\"merchant_id\",\"value\":\"m-42\"}],\"payload\":{\"order_id\":'$i'}}'; done\n\n")
	}
}

func anyQueueDomain(set *rules.Set, domain string) (*rules.Rule, bool) {
	for _, r := range set.QueueRules() {
		if r.Domain == domain {
			return r, true
		}
	}
	return nil, false
}
