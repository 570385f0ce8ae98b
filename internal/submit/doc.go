// Package submit is the submission service: POST /v1/messages (one submission, or a batch
// as a JSON array or NDJSON) from a decoded request to its answer (rule matching,
// admission, scheduling, idempotency), and GET and DELETE /v1/messages/{id} (a message's
// status, its cancel). Decoding is internal/request's; the HTTP server that mounts these
// handlers, authenticates callers (Config.CallerOf) and traces requests is
// internal/ingress. This package imports neither the server, the process package nor the
// drainer (internal/arch holds it to that).
//
// # Files
//
//   - service.go: Config, Caller, Service and New, the handlers' entry points
//     (HandleSubmit, HandleStatus, HandleCancel), the refusal counts and FlushRefusals
//   - submit.go: one submission from decoded request to answer: rule, admission, schedule,
//     idempotency; the 202 body (WriteQueued), the store-full answer, a token's domain
//   - batch.go: batch submissions, admitted together, answered item by item
//   - status.go: GET /v1/messages/{id} and DELETE /v1/messages/{id}, the 404s of ids no
//     longer tracked
//   - trace.go: the admission's span attributes and the message's trace context
//   - doc.go: this overview
package submit
