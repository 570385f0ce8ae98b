// Package admin is the admin API, /v1/admin/ (docs/http-api.md "Admin"): the rules and
// queues in force with their live numbers, runtime overrides (pause, tune, reset), purges,
// dead letters and their replay, hot keys, whoami and the audit trail. Admin is an
// http.Handler; the ingress process (internal/process/ingress) builds it and hands it to the
// HTTP server (internal/ingress), which authenticates every call (admin tokens, scopes read
// and operate) and names the caller through Admin.Caller. This package imports neither the
// server, the processes nor the drainer (internal/arch).
//
// # Files
//
//   - admin.go: Admin and its routes: views of rules and queues, overrides, purges, dead
//     letters and replays, hot keys, audit; the test seams (SetHooks)
//   - admin_keys.go: per-key overrides (GET and PATCH of a key's override, bulk changes)
//   - doc.go: this overview
package admin
