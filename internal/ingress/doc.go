// Package ingress is sluice's front door: the HTTP server of docs/http-api.md (routes,
// authentication, health, readiness, metrics). The server assembles the routes of the
// services: the submissions of internal/submit (POST /v1/messages, GET and DELETE
// /v1/messages/{id}), decoded by internal/request; the checks of internal/decide (POST
// /v1/check, POST /json; its gRPC server is served by the process); and the admin API of
// internal/admin. It authenticates callers for all of them. The ingress process that
// serves them (flags, connections, listeners, the optional in-process drainer) is
// assembled in internal/process/ingress; this package imports neither it nor the drainer.
//
// # Files
//
//   - server.go: Server, ServerConfig and NewServer (the routes, internal/submit's handlers
//     mounted), /readyz, the request metrics
//   - trace.go: POST /v1/messages inside its server span (tracing on)
//   - auth.go: tokens and scopes, token files, the admin API's and submissions'
//     authentication
//   - auditcalls.go: the audit of refused and failed admin calls and of cancels
//   - checkcallers.go: who may use the check API (internal/decide's Callers)
//   - caller.go: Caller, the token of a request, for the admin API
//   - storefull.go: the queue store's fullness (/readyz, sluice_queue_store_full)
//   - peers.go: CountPeers, the live ingress count of the degraded local limiter
//   - metrics.go: the server's metrics (the submissions' are internal/submit's)
//   - limits.go: the HTTP listener's limits against slow or hostile clients
//   - openapi.go: GET /openapi.yaml
//   - doc.go: this overview
package ingress
