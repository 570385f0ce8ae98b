// Package devstack is `sluice dev`: the whole system in one process for trying sluice
// and developing against it — an embedded NATS server with JetStream (data in -data), an
// in-process Redis-compatible store, the ingress with an in-process drainer, and a demo
// sink that logs every delivery — on the example rules by default.
//
// The example rules (deploy/examples) deliver to the demo sink's default address,
// http://127.0.0.1:8090. Wherever the sink really listens (-sink-addr), the dev stack's
// drainer sends the connections of those URLs (127.0.0.1, localhost or [::1] on port
// 8090) to it, so the rules files stay valid for a production ingress and need no edit.
//
// Every port it binds (-http, -grpc, -nats-addr, -sink-addr) fails at once, naming the
// address, when it is busy. So does the data directory when another `sluice dev` uses it:
// each holds an exclusive lock (flock) on <data>/.lock while it runs, so two embedded NATS
// servers never share one JetStream store (not guarded where there is no flock: Windows). Production binaries never link this package (nor devenv):
// cmd/sluice does.
//
// # Files
//
//   - devstack.go: Config, flags, Run and Start: the dev stack and its banner
//   - lock.go: the data directory's lock, so two sluice dev never share a store
//   - lock_flock.go: the lock as a flock, where there is one
//   - lock_other.go: no lock elsewhere
//   - doc.go: this overview
package devstack
