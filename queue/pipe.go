package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admission writes the ingress pipelines: many admissions share one round trip. They use
// EVALSHA: on a NOSCRIPT error (a fresh or restarted Redis) the caller loads Scripts() and
// executes the pipeline again.

//go:embed admitcount.lua
var admitCountSrc string

var admitCountScript = redis.NewScript(admitCountSrc)

// Scripts returns the Lua scripts of the scheduler that callers may pipeline.
func Scripts() []*redis.Script { return []*redis.Script{markDueScript, admitCountScript} }

// CountAdmittedPipe queues, on a pipeline the caller executes, the count of one message
// being admitted into key's queue (see admitcount.lua). The ingress sends it together with
// the publish, so the answer's depth and next slot cost no round trip of their own; read
// them with AdmittedResult. A message whose publish then fails must be counted out again
// (UncountPipe); a refused-as-full one heals the counter (SetDepth).
func (s *Scheduler) CountAdmittedPipe(ctx context.Context, pipe redis.Pipeliner, rule, key string, capacity int64, now time.Time) *redis.Cmd {
	k := s.keys(rule)
	return admitCountScript.EvalSha(ctx, pipe, []string{k.due, k.held, k.depth, k.idle}, us(now), key, capacity)
}

// UncountPipe counts out a message counted by CountAdmittedPipe whose publish failed or
// was a duplicate.
func (s *Scheduler) UncountPipe(ctx context.Context, pipe redis.Pipeliner, rule, key string) {
	pipe.HIncrBy(ctx, s.keys(rule).depth, key, -1)
}

// MarkDuePipe queues MarkDue of one key (after its publish was acknowledged) on a pipeline.
func (s *Scheduler) MarkDuePipe(ctx context.Context, pipe redis.Pipeliner, rule, key string, now time.Time) *redis.Cmd {
	k := s.keys(rule)
	return markDueScript.EvalSha(ctx, pipe, []string{k.due, k.lease, k.dirty, k.idle}, us(now), key)
}

// AdmittedResult reads the key's depth and next slot from a CountAdmittedPipe command.
func AdmittedResult(cmd *redis.Cmd) (depth int64, next time.Time, err error) {
	vals, err := cmd.Slice()
	if err != nil {
		return 0, time.Time{}, err
	}
	if len(vals) != 2 {
		return 0, time.Time{}, fmt.Errorf("queue: admitcount returned %d values", len(vals))
	}
	depth, _ = vals[0].(int64)
	s, _ := vals[1].(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("queue: admitcount next slot %q: %w", s, err)
	}
	return depth, time.UnixMicro(n), nil
}

// SetDepth records the known depth of a key (e.g. its capacity when the stream refused a
// message as full), healing the counter that admissions keep.
func (s *Scheduler) SetDepth(ctx context.Context, rule, key string, depth int64) error {
	dk := s.keys(rule).depth
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

// ResetDepths forgets the depth counters of every key of rule (the rule was purged).
func (s *Scheduler) ResetDepths(ctx context.Context, rule string) error {
	if err := s.rdb.Del(ctx, s.keys(rule).depth).Err(); err != nil {
		return fmt.Errorf("queue: reset depths of rule %q: %w", rule, err)
	}
	return nil
}
