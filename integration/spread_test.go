package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/sinktest"
	"github.com/sluice-io/sluice/queue"
)

const spreadRules = `
domain: shop
descriptors:
  - key: merchant
    name: spread
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "SINK"}
`

// One hot rule over a Redis Cluster: ingress and drainer processes on a 3-master cluster,
// one rule's 1,000 keys with 3 messages each. Under the own engine (the default) Redis is
// not on the path of each message, so no master becomes the rule's hot spot: while the keys
// are queued the rule's state in the whole cluster is its ownership record (a few keys,
// whatever the number of keys and messages), not per-key state. (Under the deprecated claim
// engine it was per-partition state spread over every master.) Then every message is
// delivered once, in its key's order, and no key faster than its outflow.
func TestOneRuleSpreadsOverRedisCluster(t *testing.T) {
	c := startCluster(t, clusterOptions{rules: spreadRules, redisCluster: true, ingresses: 1, drainers: 2})
	// The sink holds every delivery for a moment, so the keys stay queued while the masters
	// are looked at.
	c.sink.Answer(func(sinktest.Delivery) (int, string) {
		time.Sleep(150 * time.Millisecond)
		return 200, ""
	})
	const keys, per = 1000, 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for k := range next {
				for i := range per {
					r := c.submit(0, "shop", []kv{{"merchant", "m-" + strconv.Itoa(k)}}, strconv.Itoa(i), "")
					if r.Code != 202 {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("m-%d #%d: %d %v %v", k, i, r.Code, r.Body, r.Err))
						mu.Unlock()
					}
				}
			}
		})
	}
	for k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d submissions failed, e.g. %s", len(failed), failed[0])
	}

	// The rule's Redis state does not grow with its keys: a handful of keys in the whole
	// cluster (ownership members, leases, fence, pace entries) for 1,000 queued keys.
	token := queue.RuleToken("spread")
	ctx := context.Background()
	total := 0
	for i, m := range c.redisCl.Masters {
		var n int
		iter := m.Client(t).Scan(ctx, 0, "sl:{"+token+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); strings.HasPrefix(k, "sl:{"+token+"}") || strings.HasPrefix(k, "sl:{"+token+".") {
				n++
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("master %d (%s) holds %d keys of rule spread", i, m.Addr(), n)
		total += n
	}
	if total > 16 {
		t.Errorf("rule spread has %d Redis keys in the cluster for %d queued keys: per-key state is back on Redis", total, keys)
	}

	ds := c.waitRule("spread", keys*per, 2*time.Minute)
	if len(ds) < keys*per {
		t.Fatalf("%d of %d delivered", len(ds), keys*per)
	}
	for key, kd := range keysOf(ds) {
		if len(kd) != per {
			t.Errorf("key %s: %d deliveries, want %d (each once)", key, len(kd), per)
			continue
		}
		for i, d := range kd {
			if string(d.Payload) != strconv.Itoa(i) {
				t.Errorf("key %s: delivery %d carries %s: out of order", key, i, d.Payload)
				break
			}
		}
		if g := closestGap(kd); g < 100*time.Millisecond-45*time.Millisecond {
			t.Errorf("key %s: two deliveries %v apart at 10/s", key, g)
		}
	}
}
