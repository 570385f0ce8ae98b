// Package httpx holds the HTTP plumbing shared by the ingress and drainer servers:
// RFC 9457 problem details and the rate-limit headers (docs/http-api.md "Problem types",
// "Rate-limit headers").
//
// # Files
//
//   - problem.go: Problem (RFC 9457), WriteProblem, WriteJSON
//   - errors.go: the one mapping from what went wrong to the problem answered, and FromError
//   - ratelimit.go: the rate-limit headers (X-RateLimit-*, RateLimit, RateLimit-Policy, Retry-
//     After)
//   - etag.go: revision ETags and If-Match
//   - limits.go: the HTTP listeners' limits against slow or hostile clients
//   - body.go: Bodies (bounded, pooled request bodies), Bearer and WriteUnauthorized
//   - doc.go: this overview
package httpx
