package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Idempotency keys are opt-in per request and bounded by their TTL: one Redis string per
// key, in the rule's hash slot (per rule, not per partition: a request's idempotency key is
// not the queue's key, and SET NX needs no other key in its slot),
//
//	<prefix>sl:{t}:idem:<idempotency key>   STRING  the id of the message that first used it
//
// about 200 bytes of Redis memory for a 36-byte key and a 55-byte id (MEMORY USAGE, as
// TestClaimIdempotency measures it), kept for the TTL whatever happens to the message.

func (s *Scheduler) idemKey(rule, k string) string {
	return s.prefix + "sl:{" + RuleToken(rule) + "}:idem:" + k
}

// ClaimIdempotencyPipe queues, on a pipeline the caller executes, the claim of idempotency
// key k of rule for message id: SET NX GET with the TTL. The command's value is the id that
// already owned the key, or redis.Nil when this claim took it.
func (s *Scheduler) ClaimIdempotencyPipe(ctx context.Context, pipe redis.Pipeliner, rule, k, id string, ttl time.Duration) *redis.StatusCmd {
	return pipe.SetArgs(ctx, s.idemKey(rule, k), id, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
}

// ReleaseIdempotency removes the mapping of k if it still points at id, so a request that
// was not accepted (429) can be retried with the same key.
func (s *Scheduler) ReleaseIdempotency(ctx context.Context, rule, k, id string) error {
	err := unlockScript.Run(ctx, s.rdb, []string{s.idemKey(rule, k)}, id).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: release idempotency key: %w", err)
	}
	return nil
}

// ClaimIdempotency is ClaimIdempotencyPipe in a round trip of its own: it returns the id
// that owns k (id itself when this claim took it).
func (s *Scheduler) ClaimIdempotency(ctx context.Context, rule, k, id string, ttl time.Duration) (string, error) {
	pipe := s.rdb.Pipeline()
	cmd := s.ClaimIdempotencyPipe(ctx, pipe, rule, k, id, ttl)
	pipe.Exec(ctx)
	switch owner, err := cmd.Result(); {
	case errors.Is(err, redis.Nil):
		return id, nil
	case err != nil:
		return "", fmt.Errorf("queue: claim idempotency key: %w", err)
	default:
		return owner, nil
	}
}
