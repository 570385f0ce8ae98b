package queue

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// HoldReconcileLock takes rule's reconcile lock as another process would (tests only).
func (s *store) HoldReconcileLock(ctx context.Context, rule string) (unlock func(), ok bool, err error) {
	return s.lock(ctx, rule, "reconcile", time.Minute)
}

// DepthForTest reads the ingress's depth counter of one key.
func (s *store) DepthForTest(ctx context.Context, rule, key string) (int64, error) {
	return s.rdb.HGet(ctx, s.home(rule, key).depthOf(key), key).Int64()
}

// KeyOf is the Redis key of kind ("depth", "due", "idle", …) of the partition key is in;
// for "depth", the key's depth bucket.
func (s *store) KeyOf(rule, key, kind string) string {
	if kind == "depth" {
		return s.home(rule, key).depthOf(key)
	}
	return s.prefix + "sl:{" + partTag(rule, PartitionOf(key, s.partitions(rule))) + "}:" + kind
}

// PartKey is the Redis key of kind of partition i of rule.
func (s *store) PartKey(rule string, i int, kind string) string {
	return s.prefix + "sl:{" + partTag(rule, i) + "}:" + kind
}

// PartDepthKey is the depth bucket of key in partition i of rule.
func (s *store) PartDepthKey(rule string, i int, key string) string {
	return s.part(rule, i).depthOf(key)
}

// KeySlotForTest is keySlot of the hash tag of a Redis key ("…{tag}…").
func KeySlotForTest(key string) uint16 {
	a := strings.IndexByte(key, '{')
	b := strings.IndexByte(key[a+1:], '}')
	return keySlot(key[a+1 : a+1+b])
}

// ForgetPartitionsForTest runs what Reconcile runs to lower the partition high-water mark,
// and returns the rule's partition count and the partitions claims visit afterwards.
func (s *store) ForgetPartitionsForTest(ctx context.Context, rule string) (p, n int, err error) {
	err = s.forgetPartitions(ctx, rule)
	p, n = s.layout(ctx, rule)
	return p, n, err
}

// The admission pipeline's Redis steps, private to this package (AdmitPipeline sends them),
// under their names of old for the tests that check their scripts one by one.
type (
	Admission   = admission
	AdmitCounts = admitCounts
)

var AdmittedResults = admittedResults

func (s *store) CountAdmittedPipe(ctx context.Context, pipe redis.Pipeliner, rule string, adms []Admission) *AdmitCounts {
	if len(adms) == 0 {
		return &admitCounts{} // nothing to count: no script call
	}
	return s.markCountPipe(ctx, pipe, rule, nil, time.Time{}, adms)
}

func (s *store) MarkCountPipe(ctx context.Context, pipe redis.Pipeliner, rule string, marks []string, markNow time.Time, adms []Admission) *AdmitCounts {
	return s.markCountPipe(ctx, pipe, rule, marks, markNow, adms)
}

func (s *store) MarkDuePipe(ctx context.Context, pipe redis.Pipeliner, rule string, keys []string, now time.Time) []*redis.Cmd {
	return s.markDuePipe(ctx, pipe, rule, keys, now)
}

func (s *store) UncountPipe(ctx context.Context, pipe redis.Pipeliner, rule, key string) {
	s.uncountPipe(ctx, pipe, rule, key)
}

func (s *store) TakeIdempotencyKeyPipe(ctx context.Context, pipe redis.Pipeliner, rule, k, value string, ttl time.Duration) *IdempotencyTake {
	return s.takeIdempotencyKeyPipe(ctx, pipe, rule, k, value, ttl)
}
