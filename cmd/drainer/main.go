// Command drainer releases sluice's per-key queues at their outflow: it claims due keys in
// Redis, pops each key's head from JetStream, delivers it to the rule's sink (HTTP or
// NATS) and deletes it once the sink accepted it. Run any number of drainers against the
// same NATS and Redis; together they keep every per-key and total outflow.
// Flags and their SLUICE_* variables: README.md "Flags", or `drainer -help`.
package main

import (
	"os"
	_ "time/tzdata" // rules' time_zone works in a container without zoneinfo

	"github.com/sluice-io/sluice/internal/process"
)

func main() {
	os.Exit(process.Exec("drainer", process.RunDrainer))
}
