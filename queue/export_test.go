package queue

import (
	"context"
	"time"
)

// HoldReconcileLock takes rule's reconcile lock as another process would (tests only).
func (s *Scheduler) HoldReconcileLock(ctx context.Context, rule string) (unlock func(), ok bool, err error) {
	return s.lock(ctx, rule, "reconcile", time.Minute)
}

// DepthForTest reads the ingress's depth counter of one key.
func (s *Scheduler) DepthForTest(ctx context.Context, rule, key string) (int64, error) {
	return s.rdb.HGet(ctx, s.home(rule, key).depth, key).Int64()
}

// KeyOf is the Redis key of kind ("depth", "due", "idle", …) of the partition key is in.
func (s *Scheduler) KeyOf(rule, key, kind string) string {
	return s.prefix + "sl:{" + partTag(rule, PartitionOf(key, s.Partitions(rule))) + "}:" + kind
}

// PartKey is the Redis key of kind of partition i of rule.
func (s *Scheduler) PartKey(rule string, i int, kind string) string {
	return s.prefix + "sl:{" + partTag(rule, i) + "}:" + kind
}
