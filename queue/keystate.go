package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// KeyState is what the scheduler knows of one key: whether a drainer holds it (its head is
// being delivered: the claim engine's claims; the own engine keeps no per-key state in Redis
// while it delivers) and the retry state of its head, if the head failed before (either
// engine's: the own engine writes it only when a delivery fails).
type KeyState struct {
	Held  bool
	Retry *RetryState
}

// KeyState reads the scheduler's state of (rule, key): one round trip, nothing written.
func (s Depths) KeyState(ctx context.Context, rule, key string) (KeyState, error) {
	k := s.home(rule, key)
	pipe := s.rdb.Pipeline()
	held := pipe.HExists(ctx, k.held, key)
	try := pipe.HGet(ctx, k.try, key)
	ownTry := pipe.HGet(ctx, s.ownKey(rule, "try"), key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return KeyState{}, fmt.Errorf("queue: state of a key of rule %q: %w", rule, err)
	}
	st := KeyState{Held: held.Val()}
	for _, c := range []*redis.StringCmd{try, ownTry} {
		if c.Err() != nil {
			continue
		}
		if r, ok := decodeRetryState(c.Val()); ok && (st.Retry == nil || r.Attempts > st.Retry.Attempts) {
			st.Retry = &r
		}
	}
	return st, nil
}

// Uncount counts one message of (rule, key) out of the depth estimate (a message removed
// other than by delivery, e.g. cancelled). Best effort: a miss heals when the key empties.
func (s Depths) Uncount(ctx context.Context, rule, key string) error {
	return s.rdb.HIncrBy(ctx, s.home(rule, key).depthOf(key), key, -1).Err()
}
