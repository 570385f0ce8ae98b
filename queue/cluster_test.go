package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/redistest"
)

// onCluster are the scheduler tests that run a second time, on a real Redis Cluster (3
// masters, 1 replica each), from TestSchedulerOnCluster: every script's keys must share
// the rule's hash slot, and the rules' keys spread over the masters.
var onCluster = map[string]func(*testing.T){
	"ClaimPacesEachKeyAndLeases":               TestClaimPacesEachKeyAndLeases,
	"ClaimKeepsOutflowWithTwoSchedulers":       TestClaimKeepsOutflowWithTwoSchedulers,
	"ClaimKeepsTotalOutflowFairly":             TestClaimKeepsTotalOutflowFairly,
	"ExpiredLeaseIsHandedOver":                 TestExpiredLeaseIsHandedOver,
	"EmptyKeyRemovalNeverLosesAConcurrentMark": TestEmptyKeyRemovalNeverLosesAConcurrentMark,
	"RetryStateTravelsWithTheKey":              TestRetryStateTravelsWithTheKey,
	"ReleaseKeepsDepthCounterAndIdleSlot":      TestReleaseKeepsDepthCounterAndIdleSlot,
	"HotKeys":                                  TestHotKeys,
	"RefusedRate":                              TestRefusedRate,
	"EmptyKeyRaceWithRealEnqueues":             TestEmptyKeyRaceWithRealEnqueues,
	"ReconcileRepairsStrandedKeys":             TestReconcileRepairsStrandedKeys,
	"PartitionCountChangeLosesNothing":         TestPartitionCountChangeLosesNothing,
	"TotalOutflowAcrossPartitionsUnderSkew":    TestTotalOutflowAcrossPartitionsUnderSkew,
	"PartitionCountShrinkLosesNothing":         TestPartitionCountShrinkLosesNothing,
	"StepInAPartitionKeepsBothMeters":          TestStepInAPartitionKeepsBothMeters,
	"RenewFindsAKeyInItsOldPartition":          TestRenewFindsAKeyInItsOldPartition,
}

const onClusterTest = "TestSchedulerOnCluster/"

func TestSchedulerOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	t.Cleanup(func() {
		// The tests wrote to the cluster, not to the single server.
		var keys int64
		for _, m := range c.Masters {
			n, err := m.Client(t).DBSize(context.Background()).Result()
			if err != nil {
				t.Error(err)
			}
			keys += n
		}
		if keys == 0 {
			t.Error("no key on the cluster's masters after the scheduler tests ran on it")
		}
	})
	for name, f := range onCluster {
		t.Run(name, f)
	}
}

// testRedis is the Redis client of a scheduler test: the test binary's shared server, or
// the shared cluster when the test runs from TestSchedulerOnCluster.
func testRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	if strings.HasPrefix(t.Name(), onClusterTest) {
		return redistest.SharedCluster(t).Client(t)
	}
	return redistest.Shared(t).Client(t)
}
