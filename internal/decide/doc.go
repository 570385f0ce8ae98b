// Package decide is the decision service: it counts the descriptors of a check against the
// rules' limits (and a caller's limit overrides) and answers OK or OVER_LIMIT, envoy's rate
// limit service's way. One Service, three thin transports over it: POST /v1/check (sluice's
// JSON), POST /json (envoyproxy/ratelimit's JSON endpoint, protojson) and the envoy RLS
// v3 ShouldRateLimit over gRPC. The ingress's HTTP server (internal/ingress) routes the two
// HTTP paths here and the ingress process (internal/process/ingress) serves NewGRPCServer on
// its own listener. Bodies are decoded by internal/request. This package imports neither
// the server, the processes nor the drainer (internal/arch).
//
// # Files
//
//   - service.go: Config, Service and New, the Callers seam (who may check), metrics
//   - decide.go: the decision itself, one call for every transport: descriptors to rules,
//     counters and the limit override bounds
//   - check.go: POST /v1/check: envoy's units, the body's descriptors, the JSON answer
//   - envoy.go: envoy parity: POST /json, EnvoyConfig (the over-limit cache, detailed
//     metrics, dynamic metadata)
//   - grpc.go: the envoy RLS over gRPC: GRPCConfig, NewGRPCServer, the request and answer
//     conversions
//   - checkauth.go: the check API's credentials over HTTP and gRPC (check tokens, client
//     certificates), decided by Config.Callers
//   - doc.go: this overview
package decide
