// Package ingress is the ingress process, assembled beside the drainer process
// (internal/process) on the same skeleton: its flags and SLUICE_* variables into a validated
// Config, the Stack of connections and streams, the handlers (internal/ingress's HTTP API,
// internal/admin's admin API, internal/decide's envoy gRPC service) on their listeners, and with -drain a drainer in the same
// process (process.StartDraining). Handler packages import neither this package nor the
// drainer; the processes import them (internal/arch holds the arrows). It is its own package,
// not part of internal/process, so that the drainer binary does not link the HTTP and gRPC
// serving.
//
// cmd/ingress is one call, process.Exec("ingress", ingress.Run). Tests and `sluice dev`
// (internal/devstack) run the same process whole, in-process, on :0 ports:
//
//	cfg, err := ingress.ParseFlags(args, getenv, stderr)
//	m := &ingress.Main{Config: cfg, Logger: log}
//	err = m.Run(ctx) // returns once listening; m.Addr, m.Server, m.Stack
//	m.Close()        // soft stop; safe to call twice
//
// Tests of internal/ingress that need both import this package as ingressproc.
//
// # Files
//
//   - main.go: Run (the binary) and Main (the process: start in order, stop in reverse)
//   - config.go: Config (process.Settings, shared with the drainer, and the ingress's own
//     flags with their defaults; Flags, for docs/configuration.md's table), ParseFlags and
//     Validate
//   - doc.go: this overview
package ingress
