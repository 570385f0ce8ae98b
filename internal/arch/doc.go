// Package arch holds the module's import layering to account: its test runs `go list -deps`
// and fails on an arrow that runs the wrong way (a lower floor importing a higher one).
//
// The floors, from the bottom: the model (internal/delivery: what one delivery is, its
// outcome, where a failed one goes) below the public libraries' helpers and the services
// that implement it (retry/, internal/retryrules, internal/sink); the request handlers
// (internal/ingress) beside them; the drainer runtime (internal/drain) above those; and the
// processes (internal/process, internal/process/ingress) on top, the only packages that
// assemble a drainer, sinks and handlers into a running program. docs/layout.md has the
// table.
//
// # Files
//
//   - doc.go: this overview (the rules are in arch_test.go)
package arch
