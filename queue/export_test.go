package queue

import (
	"context"
	"time"
)

// HoldReconcileLock takes rule's reconcile lock as another process would (tests only).
func (s *Scheduler) HoldReconcileLock(ctx context.Context, rule string) (unlock func(), ok bool, err error) {
	return s.lock(ctx, rule, "reconcile", time.Minute)
}
