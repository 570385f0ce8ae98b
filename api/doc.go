// Package api holds sluice's HTTP contract in machine-readable form: openapi.yaml
// (OpenAPI 3.1), embedded, and the list of documented operations derived from it.
//
// docs/http-api.md is the reference in prose and openapi.yaml its machine-readable form;
// docs/docs_test.go holds the two to the same routes, problem types and headers. This
// package's own test checks that the document is well-formed (every $ref resolves, every operation has responses and a unique
// operationId, every problem type the server can send is documented). Routes lets a server
// test assert that the routes it serves and the documented ones agree:
//
//	for _, r := range api.Routes() {
//		// r.Pattern() is "GET /v1/messages/{id}", the form http.ServeMux registers.
//	}
//
// Everything here is read-only and safe for concurrent use. The ingress may serve
// OpenAPI() as is; change the document and docs/http-api.md together.
package api
