// Command ingress is sluice's front door: the HTTP API that admits messages into per-key
// queues and answers rate-limit checks (and the envoy rate limit service over gRPC).
// Flags and their SLUICE_* variables: README.md "Flags", or `ingress -help`; the API:
// api/openapi.yaml. The whole system in one process for development is `sluice dev`.
package main

import (
	"os"
	_ "time/tzdata" // rules' time_zone works in a container without zoneinfo

	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
)

func main() {
	os.Exit(process.Exec("ingress", ingress.Run))
}
