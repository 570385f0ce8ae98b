// Package api holds sluice's HTTP contract in machine-readable form: openapi.yaml
// (OpenAPI 3.1), embedded, and the list of documented operations derived from it.
//
// API.md is the reference; openapi.yaml follows it, and its own test checks that the
// document is well-formed (every $ref resolves, every operation has responses and a unique
// operationId, every problem type the server can send is documented). Routes lets a server
// test assert that the routes it serves and the documented ones agree:
//
//	for _, r := range api.Routes() {
//		// r.Pattern() is "GET /v1/messages/{id}", the form http.ServeMux registers.
//	}
//
// Everything here is read-only and safe for concurrent use. The ingress may serve
// OpenAPI() as is; keep the document and API.md in step (API.md wins on a conflict).
package api
