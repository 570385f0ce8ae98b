package queue

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reconciled reports what one Reconcile did.
type Reconciled struct {
	Keys     uint64 // keys with messages in the stream
	Due      int64  // keys in the due set before the repair
	Claimed  int64  // keys claimed by drainers
	Scanned  bool   // the stream's keys were listed (expensive)
	Busy     bool   // a scan was needed but another process holds the rule's reconcile lock
	Repaired int    // keys that had messages but were not scheduled, now due
}

// Deficit is how many more keys have messages in the stream than are scheduled in Redis
// (due or claimed). Two O(1) counters, read at slightly different instants: a key being
// published right now (its MarkDue on the way) shows as a deficit of 1 for a moment, and a
// key just emptied (still claimed) hides one, so only a deficit that persists means a
// stranded key.
func (r Reconciled) Deficit() int64 { return int64(r.Keys) - r.Due - r.Claimed }

// reconcileLockTTL bounds one scan's lock; a scan of 1M keys takes seconds.
const reconcileLockTTL = 2 * time.Minute

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
	r, err := CheckSchedule(ctx, q, s, rule)
	if err != nil {
		return r, err
	}
	if err := s.forgetPartitions(ctx, rule); err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: partitions: %w", rule, err)
	}
	if !force && r.Deficit() <= 0 {
		return r, nil
	}
	// One scan per rule at a time across all drainers: it is the expensive part.
	unlock, ok, err := s.lock(ctx, rule, "reconcile", reconcileLockTTL)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	if !ok {
		r.Busy = true
		return r, nil
	}
	defer unlock()
	keys, err := q.Keys(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	r.Scanned = true
	list := make([]string, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	r.Repaired, err = s.Claims.MarkDueAt(ctx, rule, now, list...)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	// The listing is the truth about depths too: reset the ingress's per-key counters
	// (admit.lua), which drift when a process crashes between publish and count.
	if err := s.setDepths(ctx, rule, keys); err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	if err := s.dropLegacyDepths(ctx, rule); err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	return r, nil
}

// CheckSchedule reads the two counters Reconcile compares (see Reconciled.Deficit) and
// changes nothing.
func CheckSchedule(ctx context.Context, q *Queues, s *Scheduler, rule string) (Reconciled, error) {
	var r Reconciled
	st, err := q.Stats(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	r.Keys = st.Keys
	r.Due, r.Claimed, err = s.Claims.Counts(ctx, rule)
	if err != nil {
		return r, fmt.Errorf("queue: reconcile rule %q: %w", rule, err)
	}
	return r, nil
}

// forgetPartitions lowers rule's partition high-water mark (sl:{t}:parts) to its current
// count once the partitions above it hold no due or claimed key, so claims stop visiting them
// after a rule's partition count went down. A process still using the higher count raises
// the mark again when it next reads it (partition.go), so nothing it marks is stranded.
func (s *store) forgetPartitions(ctx context.Context, rule string) error {
	p, n := s.layout(ctx, rule)
	if n <= p {
		return nil
	}
	pipe := s.rdb.Pipeline()
	var cmds []*redis.IntCmd
	for i := p; i < n; i++ {
		k := s.part(rule, i)
		cmds = append(cmds, pipe.ZCard(ctx, k.due), pipe.ZCard(ctx, k.lease))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for _, c := range cmds {
		if c.Val() > 0 {
			return nil
		}
	}
	parts := s.prefix + "sl:{" + RuleToken(rule) + "}:parts"
	if err := lowerPartsScript.Run(ctx, s.rdb, []string{parts}, n, p).Err(); err != nil {
		return err
	}
	s.layouts.Delete(rule)
	return nil
}

var (
	//go:embed lowerparts.lua
	lowerPartsSrc    string
	lowerPartsScript = redis.NewScript(lowerPartsSrc)
)
