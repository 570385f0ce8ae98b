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
)

// Config is everything the ingress process is told from outside. Flags have environment
// equivalents (flag wins); every field documents its default.
type Config struct {
	Rules      []string // -rules / SLUICE_RULES: rules files or directories, comma-separated. Required unless -check-config.
	HTTPAddr   string   // -http / SLUICE_HTTP_ADDR: listen address. Default ":8080".
	NATSURL    string   // -nats / SLUICE_NATS_URL: NATS server URL(s), comma-separated. Default "nats://127.0.0.1:4222"; ignored with -dev.
	RedisURL   string   // -redis / SLUICE_REDIS_URL: redis:// or unix:// URL. Default "redis://127.0.0.1:6379"; ignored with -dev.
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

	CheckConfig string // -check-config FILE: validate a rules file (or directory) and exit.

	// Drain runs a drainer (and re-admitter) inside this process. -drain; default true with
	// -dev, false otherwise (production runs separate drainer processes).
	Drain bool
	// DrainWorkers is the in-process drainer's concurrent deliveries per queue rule.
	// -drain-workers; default 32.
	DrainWorkers int
	// ReadmitMaxBackoff caps the backoff between two re-admission attempts of a parked
	// message that still finds no room. -readmit-max-backoff; default 5m.
	ReadmitMaxBackoff time.Duration

	MaxBody         int64         // -max-body / SLUICE_MAX_BODY: largest request body in bytes. Default 1 MiB.
	Replicas        int           // -replicas / SLUICE_REPLICAS: replicas of queue streams (1 or 3). Default 1.
	ShutdownTimeout time.Duration // -shutdown-timeout / SLUICE_SHUTDOWN_TIMEOUT: drain time on SIGTERM. Default 10s.
	LogFormat       string        // -log-format / SLUICE_LOG_FORMAT: json or text. Default json (text with -dev).
	LogLevel        string        // -log-level / SLUICE_LOG_LEVEL: debug, info, warn, error. Default info.
	RulesPoll       time.Duration // -rules-poll / SLUICE_RULES_POLL: how often rules files are checked for changes. Default 1s.
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
	fs.StringVar(&c.RedisURL, "redis", env("SLUICE_REDIS_URL", "redis://127.0.0.1:6379"), "Redis URL (env SLUICE_REDIS_URL)")
	fs.StringVar(&c.GRPCAddr, "grpc", env("SLUICE_GRPC_ADDR", ":8081"), "envoy rate limit service (gRPC) listen address; empty disables (env SLUICE_GRPC_ADDR)")
	fs.StringVar(&c.DebugAddr, "debug-addr", env("SLUICE_DEBUG_ADDR", ""), "pprof listen address, e.g. 127.0.0.1:6070; empty disables (env SLUICE_DEBUG_ADDR)")
	grpcHeaders := fs.String("grpc-response-headers", env("SLUICE_GRPC_RESPONSE_HEADERS", "false"), "add rate-limit headers to every gRPC answer, not only for rules with response_headers (env SLUICE_GRPC_RESPONSE_HEADERS)")
	fs.StringVar(&c.AdminToken, "admin-token", env("SLUICE_ADMIN_TOKEN", ""), "bearer token of the admin API (env SLUICE_ADMIN_TOKEN)")
	fs.BoolVar(&c.Dev, "dev", false, "one process: embedded NATS, in-process drainer and store, demo sink")
	fs.StringVar(&c.DataDir, "data", env("SLUICE_DATA", "./data"), "JetStream store directory of -dev (env SLUICE_DATA)")
	fs.StringVar(&c.DevNATSAddr, "dev-nats-addr", "127.0.0.1:4222", "listen address of the embedded NATS server of -dev (port 0: any)")
	fs.StringVar(&c.DevSinkAddr, "dev-sink-addr", "127.0.0.1:8090", "listen address of the demo sink of -dev")
	fs.StringVar(&c.CheckConfig, "check-config", "", "validate this rules file or directory and exit")
	drainFlag := fs.String("drain", "", "run a drainer in this process: true or false (default true with -dev)")
	fs.IntVar(&c.DrainWorkers, "drain-workers", 32, "concurrent deliveries of the in-process drainer, per queue rule")
	fs.DurationVar(&c.ReadmitMaxBackoff, "readmit-max-backoff", 5*time.Minute, "longest wait between re-admission attempts of a parked message")
	maxBody := fs.String("max-body", env("SLUICE_MAX_BODY", "1048576"), "largest request body in bytes (env SLUICE_MAX_BODY)")
	replicas := fs.String("replicas", env("SLUICE_REPLICAS", "1"), "replicas of queue streams, 1 or 3 (env SLUICE_REPLICAS)")
	shutdown := fs.String("shutdown-timeout", env("SLUICE_SHUTDOWN_TIMEOUT", "10s"), "graceful shutdown time (env SLUICE_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.LogFormat, "log-format", env("SLUICE_LOG_FORMAT", ""), "json or text; default json, text with -dev (env SLUICE_LOG_FORMAT)")
	fs.StringVar(&c.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	poll := fs.String("rules-poll", env("SLUICE_RULES_POLL", "1s"), "how often rules files are checked for changes (env SLUICE_RULES_POLL)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, p := range strings.Split(*rules, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Rules = append(c.Rules, p)
		}
	}
	var err error
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
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return c, fmt.Errorf("-log-format: want json or text, got %q", c.LogFormat)
	}
	if c.CheckConfig == "" && len(c.Rules) == 0 {
		return c, errors.New("-rules is required (a rules file or directory; see deploy/examples)")
	}
	return c, nil
}
