package api

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var document []byte

// OpenAPI returns a copy of openapi.yaml, e.g. to serve it or feed it to a validator.
func OpenAPI() []byte { return bytes.Clone(document) }

// Route is one documented operation.
type Route struct {
	// Method is the HTTP method in upper case ("GET").
	Method string
	// Path is the OpenAPI path template ("/v1/admin/queues/{name}/keys/{key}"). Its
	// {name} placeholders are the same as http.ServeMux wildcards: each matches exactly
	// one (percent-encoded) path segment.
	Path string
	// OperationID is the operation's unique operationId ("getQueueKey").
	OperationID string
	// Admin is set for operations that need the admin bearer token (401 without it).
	Admin bool
}

// Pattern is the route as an http.ServeMux pattern: "GET /v1/messages/{id}".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// Routes lists the operations of openapi.yaml's paths (not its webhooks), in document
// order. It panics if the embedded document cannot be read, which this package's test
// rules out at build time.
func Routes() []Route {
	rs, err := parsedRoutes()
	if err != nil {
		panic(err)
	}
	return append([]Route(nil), rs...)
}

var parsedRoutes = sync.OnceValues(func() ([]Route, error) { return parseRoutes(document) })

// methods are the operation keys of an OpenAPI Path Item.
var methods = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}

func parseRoutes(doc []byte) ([]Route, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	if len(root.Content) != 1 {
		return nil, fmt.Errorf("api: openapi.yaml: not one YAML document")
	}
	top := root.Content[0]
	globalAdmin := isAdmin(mapGet(top, "security"))
	paths := mapGet(top, "paths")
	if paths == nil || paths.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("api: openapi.yaml: no paths")
	}
	var out []Route
	for i := 0; i+1 < len(paths.Content); i += 2 {
		path, item := paths.Content[i].Value, paths.Content[i+1]
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("api: openapi.yaml: path %s is not an object", path)
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			m, op := item.Content[j].Value, item.Content[j+1]
			if !methods[m] {
				continue
			}
			r := Route{Method: strings.ToUpper(m), Path: path, Admin: globalAdmin}
			if id := mapGet(op, "operationId"); id != nil {
				r.OperationID = id.Value
			}
			if sec := mapGet(op, "security"); sec != nil {
				r.Admin = isAdmin(sec)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// isAdmin reports whether a security requirement list names the adminToken scheme.
func isAdmin(sec *yaml.Node) bool {
	if sec == nil || sec.Kind != yaml.SequenceNode {
		return false
	}
	for _, req := range sec.Content {
		if mapGet(req, "adminToken") != nil {
			return true
		}
	}
	return false
}

// mapGet returns the value of key in a YAML mapping node, or nil.
func mapGet(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
