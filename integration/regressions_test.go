package integration_test

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Regression tests for bugs this suite found in sluice (fixed since).

// Every process ensures the same R3 streams and KV buckets at start. When several start
// at once (a deployment rollout), concurrent creation of one R3 stream is answered to one
// client only (nats-io/nats.go#949); the others must retry instead of waiting out their
// start timeout and exiting (found by this suite, fixed in a737248).
func TestConcurrentStartOfAllProcesses(t *testing.T) {
	start := time.Now()
	c := startCluster(t, clusterOptions{rules: e2eRules, allAtOnce: true})
	t.Logf("%d processes ready %v after a simultaneous start", len(c.ingress)+len(c.drainers), time.Since(start).Round(time.Millisecond))
}

// With Redis down, admission works (degraded), with or without an Idempotency-Key, in
// milliseconds (found by this suite: the idempotency claim took ~1.8 s per request while
// Redis was down; fixed in a737248).
func TestIdempotentAdmissionFastWhileRedisDown(t *testing.T) {
	c := startCluster(t, clusterOptions{rules: faultRules, drainers: 1})
	if r := c.submit(0, "faults", []kv{{"account_id", "warm"}}, `0`, "warm-1"); r.Code != 202 {
		t.Fatalf("before: %d %v %v", r.Code, r.Body, r.Err)
	}
	c.redis.Stop()
	var slowest time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		r := c.submit(i%2, "faults", []kv{{"account_id", "k"}}, `1`, "idem-down-"+string(rune('a'+i)))
		took := time.Since(start)
		if r.Code != 202 {
			t.Fatalf("with Redis down: %d %v %v", r.Code, r.Body, r.Err)
		}
		slowest = max(slowest, took)
	}
	if slowest > 500*time.Millisecond {
		t.Fatalf("an idempotent submission took %v with Redis down (without an Idempotency-Key: milliseconds)", slowest)
	}
}

// docs/http-api.md (POST /v1/messages): the same idempotency_key again answers 200 with the original, also when the
// repeats arrive at once over both ingresses (found by this suite: repeats that arrived
// before the first request's status was written answered 202; fixed in f6c9dc5).
func TestConcurrentIdempotentRepeatsAnswer200(t *testing.T) {
	c := startCluster(t, clusterOptions{rules: faultRules, drainers: 1})
	for round := 0; round < 3; round++ {
		codes := make([]int, 8)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = c.submit(i%2, "faults", []kv{{"account_id", "idem"}}, `{}`, fmt.Sprint("same-key-", round)).Code
			}()
		}
		wg.Wait()
		created := 0
		for _, code := range codes {
			if code == 202 {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("round %d: answers %v: %d × 202 for one Idempotency-Key", round, codes, created)
		}
	}
}
