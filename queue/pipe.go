package queue

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// admission writes the ingress pipelines: many admissions share one round trip. They use
// EVALSHA: on a NOSCRIPT error (a fresh or restarted Redis) the caller loads Scripts() and
// executes the pipeline again.

// admit.lua is admission's Redis side, whole: marks, counts and stored counts (see its
// header); every admission call is it with some parts empty.
//
//go:embed admit.lua
var admitSrc string

var admitScript = redis.NewScript(admitSrc)

// Scripts returns the Lua scripts of the scheduler that callers may pipeline.
func Scripts() []*redis.Script {
	return []*redis.Script{admitScript}
}

// admission is one message being counted into its key's queue by markCountPipe.
type admission struct {
	Key      string
	Capacity int64
	Now      time.Time
	// Stored: the message's publish was already acknowledged, and its key is made due in
	// the same script call, after the counts (admit.lua's stored counts), instead of by a
	// markDuePipe of its own.
	Stored bool
}

// markCountPipe queues, on a pipeline the caller executes, markDuePipe of marks (made due
// at markNow) followed by the count of adms, the messages being admitted into rule's
// queues (see admit.lua), in order: one admit.lua call per partition the keys fall in (each
// touches one slot; the cluster client sends each to its node). The ingress sends it
// together with the publishes, so the answers' depths and next slots cost no round trip of
// their own; read them with admittedResults. It returns the counts' pending result (nil
// without adms). A message whose publish then fails must be counted out again
// (uncountPipe); a refused-as-full one heals the counter (SetDepth). Stored counts mark
// their keys after every count of the call (admit.lua), so marks of earlier admissions
// still go first. A script unpacks all of a call's keys, marked and counted, onto Lua's
// stack, which holds under 8,000 values: keep a call's marks and counts together below that
// (the ingress's batches hold at most 4,096).
func (s *store) markCountPipe(ctx context.Context, pipe redis.Pipeliner, rule string, marks []string, markNow time.Time, adms []admission) *admitCounts {
	if len(adms) == 0 {
		if len(marks) > 0 {
			s.markDuePipe(ctx, pipe, rule, marks, markNow)
		}
		return nil
	}
	p := s.partitions(rule)
	out := &admitCounts{n: len(adms)}
	if p == 1 {
		out.cmds = []*redis.Cmd{s.countPipe(ctx, pipe, rule, 0, marks, markNow, adms)}
		return out
	}
	markParts := s.byPartition(rule, marks)
	byPart := map[int][]int{}
	for j, a := range adms {
		i := PartitionOf(a.Key, p)
		byPart[i] = append(byPart[i], j)
	}
	for i, ks := range markParts {
		if _, ok := byPart[i]; !ok {
			s.markDuePart(ctx, pipe, rule, i, ks, markNow)
		}
	}
	part := make([]admission, 0, len(adms))
	for i, js := range byPart {
		part = part[:0]
		for _, j := range js {
			part = append(part, adms[j])
		}
		out.cmds = append(out.cmds, s.countPipe(ctx, pipe, rule, i, markParts[i], markNow, part))
		out.idx = append(out.idx, js)
	}
	return out
}

// countPipe counts adms, all of partition i, after marking marks of the same partition
// (admit.lua) when there are any.
func (s *store) countPipe(ctx context.Context, pipe redis.Pipeliner, rule string, i int, marks []string, markNow time.Time, adms []admission) *redis.Cmd {
	k := s.part(rule, i)
	args := make([]any, 0, 2+len(marks)+5*len(adms))
	args = append(args, usOrZero(markNow), len(marks))
	for _, m := range marks {
		args = append(args, m)
	}
	for _, a := range adms {
		stored := 0
		if a.Stored {
			stored = 1
		}
		args = append(args, a.Key, a.Capacity, us(a.Now), stored, depthBucket(a.Key))
	}
	return admitScript.EvalSha(ctx, pipe, k.admitKeys(), args...)
}

// admitCounts is the pending result of a markCountPipe: one script call per partition.
// On a cluster one node may answer NOSCRIPT while another ran its part: Err reports it, and a
// caller that sends the whole count again counts the other part twice — an estimate off by
// those messages until the key empties or the reconciler resets it (admit.lua).
type admitCounts struct {
	n    int
	cmds []*redis.Cmd
	idx  [][]int // per cmd, the admissions it counted (nil: all, in order)
}

// Err is the first error of its script calls (nil when every one ran).
func (a *admitCounts) Err() error {
	for _, c := range a.cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// uncountPipe counts out a message counted by markCountPipe whose publish failed or
// was a duplicate.
func (s *store) uncountPipe(ctx context.Context, pipe redis.Pipeliner, rule, key string) {
	pipe.HIncrBy(ctx, s.home(rule, key).depthOf(key), key, -1)
}

// markDuePipe queues MarkDue of rule's keys (after their publishes were acknowledged) on a
// pipeline: one script call per partition the keys fall in.
func (s *store) markDuePipe(ctx context.Context, pipe redis.Pipeliner, rule string, keys []string, now time.Time) []*redis.Cmd {
	parts := s.byPartition(rule, keys)
	cmds := make([]*redis.Cmd, 0, len(parts))
	for i, ks := range parts {
		cmds = append(cmds, s.markDuePart(ctx, pipe, rule, i, ks, now))
	}
	return cmds
}

// markDuePart is markDuePipe of keys, all of partition i.
func (s *store) markDuePart(ctx context.Context, pipe redis.Pipeliner, rule string, i int, keys []string, now time.Time) *redis.Cmd {
	return s.countPipe(ctx, pipe, rule, i, keys, now, nil) // marks alone
}

// admitKeys are admit.lua's KEYS of partition k.
func (k ruleKeys) admitKeys() []string {
	return []string{k.due, k.lease, k.dirty, k.idle, k.held, k.depth}
}

// Admitted is the result of one admission counted by markCountPipe.
type Admitted struct {
	Depth int64     // the key's depth, counting the message
	Next  time.Time // when the key's next message may leave
	// Held: a drainer holds the key — its head is being delivered, still counted in Depth,
	// and Next is the slot after it (so Depth-2 messages wait ahead of this one from Next).
	Held bool
}

// admittedResults reads the results of a markCountPipe of n admissions into out
// (reused; grown as needed), in the admissions' order.
func admittedResults(c *admitCounts, n int, out []Admitted) ([]Admitted, error) {
	if n != c.n {
		return out, fmt.Errorf("queue: admit.lua of %d admissions read as %d", c.n, n)
	}
	out = slices.Grow(out[:0], n)[:n]
	for x, cmd := range c.cmds {
		vals, err := cmd.Slice()
		if err != nil {
			return out[:0], err
		}
		m := n
		if c.idx != nil {
			m = len(c.idx[x])
		}
		if len(vals) != 3*m+1 { // and the marks' count, last
			return out[:0], fmt.Errorf("queue: admit.lua returned %d values for %d admissions", len(vals), m)
		}
		for i := 0; i+2 < len(vals); i += 3 {
			depth, ok1 := vals[i].(int64)
			next, ok2 := vals[i+1].(int64)
			held, ok3 := vals[i+2].(int64)
			if !ok1 || !ok2 || !ok3 {
				return out[:0], fmt.Errorf("queue: admit.lua returned %T %T %T, want integers", vals[i], vals[i+1], vals[i+2])
			}
			j := i / 3
			if c.idx != nil {
				j = c.idx[x][j]
			}
			out[j] = Admitted{Depth: depth, Next: time.UnixMicro(next), Held: held == 1}
		}
	}
	return out, nil
}

// SetDepth records the known depth of a key (e.g. its capacity when the stream refused a
// message as full), healing the counter that admissions keep.
func (s Depths) SetDepth(ctx context.Context, rule, key string, depth int64) error {
	dk := s.home(rule, key).depthOf(key)
	var err error
	if depth <= 0 {
		err = s.rdb.HDel(ctx, dk, key).Err()
	} else {
		err = s.rdb.HSet(ctx, dk, key, depth).Err()
	}
	if err != nil {
		return fmt.Errorf("queue: set depth in rule %q: %w", rule, err)
	}
	return nil
}

// ResetDepths forgets the depth counters of every key of rule (the rule was purged), in
// every partition: its depth buckets, and the single hash of earlier versions.
func (s Depths) ResetDepths(ctx context.Context, rule string) error {
	_, n := s.layout(ctx, rule)
	for i := range n {
		if err := s.delDepths(ctx, s.part(rule, i)); err != nil {
			return fmt.Errorf("queue: reset depths of rule %q: %w", rule, err)
		}
	}
	return nil
}

// delDepths deletes partition k's depth buckets and its earlier versions' single depth
// hash: one pipeline of DELs of 1,024 keys each (one slot: the partition's).
func (s *store) delDepths(ctx context.Context, k ruleKeys) error {
	pipe := s.rdb.Pipeline()
	ks := make([]string, 0, 1024)
	ks = append(ks, k.depth)
	for b := range depthBuckets {
		ks = append(ks, depthBucketKey(k.depth, b))
		if len(ks) == cap(ks) || b == depthBuckets-1 {
			pipe.Del(ctx, ks...)
			ks = make([]string, 0, 1024)
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}
