// Package process builds sluice's two processes — the ingress and the drainer — one way:
// typed flags with SLUICE_* environment variables (FlagSet, flags.go), the logger, the
// listeners with the hostile-input limits and pprof, signals, and a soft then hard stop
// (run.go), on a Stack of connections and streams opened the same way for both (stack.go,
// redis.go), with the drain side wired once (drainwire.go). The drainer process is here
// (drainer.go); the ingress process is beside it, in internal/process/ingress (Main), a
// package of its own so that the drainer binary does not link the HTTP and gRPC server.
// Handler packages (internal/ingress) import neither.
//
// cmd/ingress and cmd/drainer are each one call: Exec("ingress", ingress.Run) (that
// package), Exec("drainer", RunDrainer). Tests run the same processes whole, in-process,
// on :0 ports:
//
//	cfg, err := ingress.ParseFlags(args, getenv, stderr)
//	m := &ingress.Main{Config: cfg, Logger: log}
//	err = m.Run(ctx) // returns once listening; m.Addr, m.Stack
//	m.Close()        // soft stop; safe to call twice
//
// and ParseDrainerFlags with Drainer likewise. Zero values: a Drainer or ingress.Main
// needs only its Config. Run starts, Close stops (both once; Close is safe to call twice
// and from any goroutine). Defaults are written once, in the flag declarations (what both
// processes share in Settings.Declare, embedded by ingress.Config and DrainerConfig), and listed
// by ingress.Flags and DrainerFlags for the flag tables of docs/configuration.md.
//
// The package never links the development world (embedded NATS, in-process Redis, the
// demo sink): `sluice dev` (internal/devstack) builds an ingress.Main on top of those.
//
// # Files
//
//   - run.go: Exec, SignalContext, ExitCode: a binary's run, signals, soft and hard stop, exit
//     codes
//   - flags.go: FlagSet: typed flags, each with its SLUICE_* variable and documented default
//   - settings.go: Settings, what both processes are told (rules, listeners, NATS, Redis,
//     TLS, streams, logging, drain settings): one flag table (Declare), one check
//     (Validate), and what both build from it (OpenTLS, StackConfig, DrainDeps)
//   - stack.go: the Stack every process stands on: NATS, Redis, streams, scheduler, statuses,
//     overrides, admission
//   - redis.go: the -redis URL: one server, Cluster or Sentinel, and sluice's client defaults
//   - drainwire.go: the drain side of a process: drain loop, sinks, re-admitter, gauges
//   - counting.go: the cluster-wide delivered counts behind the admin API's drained_per_second
//   - drainer.go: the drainer process: its own flags (leases, ownership), config and RunDrainer
//   - doc.go: this overview
package process
