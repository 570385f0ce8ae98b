// Package process builds sluice's two processes — the ingress and the drainer — one way:
// typed flags with SLUICE_* environment variables (flags.go), the logger, the
// health/metrics/pprof listeners, signals, and a soft then hard shutdown (run.go), on a
// Stack of connections and streams opened the same way for both (stack.go, redis.go).
//
// cmd/ingress and cmd/drainer are each one call to Exec with RunIngress or RunDrainer.
// Tests run the same processes whole, in-process, on :0 ports:
//
//	cfg, err := ingress.ParseFlags(args, getenv, stderr)
//	m := &ingress.Main{Config: cfg, Logger: log}
//	err = m.Run(ctx) // returns once listening; m.Addr, m.Stack
//	m.Close()        // soft stop; safe to call twice
//
// The package never links the development world (embedded NATS, in-process Redis, the
// demo sink): `sluice dev` (internal/devstack) builds an Ingress on top of those.
package process
