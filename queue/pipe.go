package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed admitmark.lua
var admitMarkSrc string

var admitMarkScript = redis.NewScript(admitMarkSrc)

func (s *Scheduler) depthKey(rule string) string { return s.keys(rule).depth }

// MarkAdmittedPipe queues, on a pipeline the caller executes, the Redis side of one
// admission: the key is made due (as MarkDue) and its depth counter incremented. Read the
// result with AdmittedResult after Exec. Batching many admissions into one pipeline is
// what makes admission cheap; see admitmark.lua for how the depth counter stays honest.
// It uses EVALSHA: on a NOSCRIPT error (a fresh or restarted Redis) the caller loads
// Scripts() and executes the pipeline again.
func (s *Scheduler) MarkAdmittedPipe(ctx context.Context, pipe redis.Pipeliner, rule, key string, capacity int64, now time.Time) *redis.Cmd {
	k := s.keys(rule)
	return admitMarkScript.EvalSha(ctx, pipe, []string{k.due, k.lease, k.dirty, k.held, k.depth, k.idle}, us(now), key, capacity)
}

// AdmittedResult reads the key's depth and next slot from a MarkAdmittedPipe command.
func AdmittedResult(cmd *redis.Cmd) (depth int64, next time.Time, err error) {
	vals, err := cmd.Slice()
	if err != nil {
		return 0, time.Time{}, err
	}
	if len(vals) != 2 {
		return 0, time.Time{}, fmt.Errorf("queue: admitmark returned %d values", len(vals))
	}
	depth, _ = vals[0].(int64)
	s, _ := vals[1].(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("queue: admitmark next slot %q: %w", s, err)
	}
	return depth, time.UnixMicro(n), nil
}

// SetDepth records the known depth of a key (e.g. its capacity when the stream refused a
// message as full), healing the counter that admissions keep.
func (s *Scheduler) SetDepth(ctx context.Context, rule, key string, depth int64) error {
	dk := s.depthKey(rule)
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

// Scripts returns the Lua scripts of the scheduler that callers may pipeline.
func Scripts() []*redis.Script { return []*redis.Script{markDueScript, admitMarkScript} }
