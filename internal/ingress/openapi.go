package ingress

import "github.com/sluice-io/sluice/api"

// openAPIDocument is api/openapi.yaml as embedded in the binary, served at
// GET /openapi.yaml (application/yaml).
var openAPIDocument = api.OpenAPI()
