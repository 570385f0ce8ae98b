// Package ingress is sluice's front door: the HTTP server of docs/http-api.md and the
// submission service (submit, status, cancel, health, metrics). The server assembles the
// routes of the other services: the checks of internal/decide (POST /v1/check, POST /json;
// its gRPC server is served by the process) and the admin API of internal/admin, which it
// authenticates. The ingress process that serves them (flags, connections, listeners, the
// optional in-process drainer) is assembled in internal/process/ingress; this package
// imports neither it nor the drainer.
//
// # Files
//
//   - server.go: Server, ServerConfig and NewServer (the routes), the status and cancel
//     handlers, /readyz, the request metrics
//   - submit.go: one submission from decoded request (internal/request's Submit) to
//     answer: rule, admission, schedule, idempotency
//   - trace.go: POST /v1/messages and the tracing of admissions
//   - batch.go: batch submissions (a JSON array or NDJSON), decoded by internal/request
//   - auth.go: tokens and scopes, token files, the admin API's and submissions'
//     authentication
//   - auditcalls.go: the audit of refused and failed admin calls and of cancels
//   - checkcallers.go: who may use the check API (internal/decide's Callers)
//   - caller.go: Caller, the token of a request, for the admin API
//   - storefull.go: the queue store's fullness (503 #store-full, /readyz)
//   - peers.go: CountPeers, the live ingress count of the degraded local limiter
//   - metrics.go: the server's and submissions' metrics
//   - limits.go: the HTTP listener's limits against slow or hostile clients
//   - openapi.go: GET /openapi.yaml
//   - doc.go: this overview
package ingress
