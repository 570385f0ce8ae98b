package integration_test

import (
	"os"
	"testing"
	"time"
)

// Failing tests for bugs found in sluice, skipped with a precise description until fixed
// (SLUICE_BUGS=1 runs them anyway).

func skipKnownBug(t *testing.T, desc string) {
	t.Helper()
	if os.Getenv("SLUICE_BUGS") == "" {
		t.Skip("BUG: " + desc)
	}
}

// Every process ensures the same R3 streams and KV buckets at start. When several start
// at once (a deployment rollout), concurrent creation of one R3 stream is answered to one
// client only; the others wait for their 30 s start timeout and exit ("ensure stream
// SLUICE_DEAD: context deadline exceeded"; nats-io/nats.go#949). Ensure should retry with
// a short per-attempt timeout (the second attempt finds the stream and updates it).
func TestBugConcurrentStartOfAllProcesses(t *testing.T) {
	skipKnownBug(t, "2 ingress + 2 drainers started at the same moment against a fresh R3 cluster: all but one exit after 30 s with `ensure stream …: context deadline exceeded` (queue/retry/overrides Ensure do one CreateOrUpdateStream with the whole start timeout; concurrent R3 creation leaves the losers unanswered, nats-io/nats.go#949)")
	start := time.Now()
	c := startCluster(t, clusterOptions{rules: e2eRules, allAtOnce: true})
	t.Logf("%d processes ready %v after a simultaneous start", len(c.ingress)+len(c.drainers), time.Since(start).Round(time.Millisecond))
}
