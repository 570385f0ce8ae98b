package queue

import (
	"context"
	"fmt"
	"time"
)

// Reconciled reports what one Reconcile did.
type Reconciled struct {
	Keys     uint64 // keys with messages in the stream
	Due      int64  // keys in the due set before the repair
	Claimed  int64  // keys claimed by drainers
	Scanned  bool   // the stream's keys were listed (expensive)
	Repaired int    // keys that had messages but were not scheduled, now due
}

// Reconcile repairs rule's schedule from its stream: a key that has messages but is neither
// due nor claimed (the ingress crashed between publish and MarkDue) is made due at now.
//
// Listing the stream's keys needs a wildcard subject filter, which costs seconds at 100k
// keys, so it is not done on every call: first two O(1) counters are compared — the stream's
// number of keys with messages (NumSubjects) against due + claimed keys in Redis. Every key
// with messages is normally scheduled, so only "stream has more keys than Redis" can mean a
// stranded key, and only then (or with force) the keys are listed and marked due (ZADD NX
// semantics: scheduled keys keep their pacing; claimed keys are only flagged).
//
// The counters can hide a stranded key behind a stale due entry (a key that was purged but
// is still due); a stale entry disappears the first time a drainer claims it and finds it
// empty, so the next call sees the difference. force (e.g. every few minutes) bounds even
// that. A transient difference (a publish whose MarkDue is on its way) is repaired
// harmlessly: the key is marked due once more.
func Reconcile(ctx context.Context, q *Queues, s *Scheduler, rule string, now time.Time, force bool) (Reconciled, error) {
	var r Reconciled
	st, err := q.Stats(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	r.Keys = st.Keys
	r.Due, r.Claimed, err = s.Counts(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	if !force && int64(st.Keys) <= r.Due+r.Claimed {
		return r, nil
	}
	keys, err := q.Keys(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	r.Scanned = true
	list := make([]string, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	r.Repaired, err = s.MarkDueAt(ctx, rule, now, list...)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	return r, nil
}
