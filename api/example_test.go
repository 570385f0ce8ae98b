package api_test

import (
	"fmt"

	"github.com/sluice-io/sluice/api"
)

func ExampleRoutes() {
	for _, r := range api.Routes() {
		auth := ""
		if r.Admin {
			auth = " (admin token)"
		}
		fmt.Println(r.Pattern() + auth)
	}
	// Output:
	// POST /v1/messages
	// GET /v1/messages/{id}
	// DELETE /v1/messages/{id}
	// POST /v1/check
	// POST /json
	// GET /v1/admin/rules (admin token)
	// GET /v1/admin/queues (admin token)
	// GET /v1/admin/queues/{name} (admin token)
	// PATCH /v1/admin/queues/{name} (admin token)
	// POST /v1/admin/queues/{name}/purge (admin token)
	// GET /v1/admin/queues/{name}/keys (admin token)
	// POST /v1/admin/queues/{name}/keys (admin token)
	// GET /v1/admin/queues/{name}/keys/{key} (admin token)
	// PATCH /v1/admin/queues/{name}/keys/{key} (admin token)
	// DELETE /v1/admin/queues/{name}/keys/{key} (admin token)
	// GET /v1/admin/dead (admin token)
	// POST /v1/admin/dead/{id}/replay (admin token)
	// POST /v1/admin/dead/replay (admin token)
	// GET /v1/admin/whoami (admin token)
	// GET /v1/admin/audit (admin token)
	// GET /metrics
	// GET /ui/
	// GET /healthz
	// GET /readyz
	// GET /openapi.yaml
}
