package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/queue"
)

// pipelineOnCluster are the batch tests that run a second time, on a real Redis Cluster (3
// masters, 1 replica each), from TestAdmitPipelineOnCluster: one pipeline carries several rules'
// script calls and status records, which the cluster client splits by node; each script's
// keys share its rule's hash slot.
var pipelineOnCluster = map[string]func(*testing.T){
	"ConcurrentCountsOfOneKey":           TestConcurrentCountsOfOneKey,
	"CountsOfManyRulesAndKeysInOneBatch": TestCountsOfManyRulesAndKeysInOneBatch,
	"DepthIsClampedToCapacity":           TestDepthIsClampedToCapacity,
	"Undo":                               TestUndo,
	"TakeIdempotencyKey":                 TestTakeIdempotencyKey,
	"CountAfterMarkSeesTheKeyDue":        TestCountAfterMarkSeesTheKeyDue,
}

const pipelineOnClusterTest = "TestAdmitPipelineOnCluster/"

func TestAdmitPipelineOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	t.Cleanup(func() {
		// The tests wrote to the cluster, and to more than one of its masters.
		used := 0
		for _, m := range c.Masters {
			n, err := m.Client(t).DBSize(context.Background()).Result()
			if err != nil {
				t.Error(err)
			}
			if n > 0 {
				used++
			}
		}
		if used < 2 {
			t.Errorf("the batch tests wrote to %d of the cluster's masters, want several", used)
		}
	})
	for name, f := range pipelineOnCluster {
		t.Run(name, f)
	}
}

// pipelineRedis is the Redis client of a batch test: the test binary's shared server, or the
// shared cluster when the test runs from TestAdmitPipelineOnCluster.
func pipelineRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	if strings.HasPrefix(t.Name(), pipelineOnClusterTest) {
		return redistest.SharedCluster(t).Client(t)
	}
	return redistest.Shared(t).Client(t)
}

// A pipeline that meets NOSCRIPT on a cluster (a master restarted, failed over to a replica
// that never ran the scripts, or SCRIPT FLUSH) loads the scripts on every master and sends
// the script calls again, for rules on every master. Not parallel: it flushes the shared
// cluster's scripts, before the parallel tests start.
func TestScriptsReloadedOnEveryClusterNode(t *testing.T) {
	cl := redistest.SharedCluster(t).Client(t)
	r := newRig(t, cl)
	ctx := context.Background()
	var rules []string
	masters := map[string]bool{}
	for i := 0; i < 12; i++ {
		rule := fmt.Sprintf("rule-%d", i)
		rules = append(rules, rule)
		m, err := cl.MasterForKey(ctx, r.prefix+"sl:{"+queue.RuleToken(rule)+"}:depth")
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the rules' keys are on %d masters, want all 3", len(masters))
	}
	countAll := func(want int64) {
		t.Helper()
		var wg sync.WaitGroup
		for _, rule := range rules {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := rule + "-" + strconv.FormatInt(want, 10)
				res, owner, err, cerr := countClaim(r.b, rule, "k", 100, t0, "idem-"+id, id)
				if err != nil || res.Depth != want {
					t.Errorf("%s: depth %d, %v; want %d", rule, res.Depth, err, want)
				}
				if cerr != nil || owner != id {
					t.Errorf("%s: idempotency claim %q %v", rule, owner, cerr)
				}
				r.b.Mark(rule, "k", t0)
			}()
		}
		wg.Wait()
	}
	countAll(1)
	if err := cl.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t0f := time.Now()
	countAll(2)
	t.Logf("counts after SCRIPT FLUSH: %v", time.Since(t0f))
	countAll(3)
}
