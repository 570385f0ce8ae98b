package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Idempotency keys are opt-in per request and bounded by their TTL: one Redis string per
// key, in the rule's hash slot (per rule, not per partition: a request's idempotency key is
// not the queue's key, and SET NX needs no other key in its slot),
//
//	<prefix>sl:{t}:idem:<idempotency key>   STRING  "<id>" or "<id> <digest>" (IdempotencyValue)
//
// the id of the message that first used it and, when the caller gave one, a digest of the
// request that made it, so that a repeat carrying another request is told apart from a
// retry (ids never contain a space). About 200 bytes of Redis memory for a 36-byte key and a
// 55-byte id, plus the digest's 22 (MEMORY USAGE, as TestClaimIdempotency measures it), kept
// for the TTL whatever happens to the message.

// IdempotencyValue is what a claim stores: the message id, and digest when not empty.
func IdempotencyValue(id, digest string) string {
	if digest == "" {
		return id
	}
	return id + " " + digest
}

// SplitIdempotencyValue returns the id and the digest of a claim's value; digest is ""
// for a value stored without one (or by a version before digests).
func SplitIdempotencyValue(v string) (id, digest string) {
	id, digest, _ = strings.Cut(v, " ")
	return id, digest
}

func (s *Scheduler) idemKey(rule, k string) string {
	return s.prefix + "sl:{" + RuleToken(rule) + "}:idem:" + k
}

// ClaimIdempotencyPipe queues, on a pipeline the caller executes, the claim of idempotency
// key k of rule for value (a message id, or IdempotencyValue): SET NX GET with the TTL. The
// command's value is the value that already owned the key, or redis.Nil when this claim
// took it.
func (s *Scheduler) ClaimIdempotencyPipe(ctx context.Context, pipe redis.Pipeliner, rule, k, value string, ttl time.Duration) *redis.StatusCmd {
	return pipe.SetArgs(ctx, s.idemKey(rule, k), value, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
}

// ReleaseIdempotency removes the mapping of k if it still holds value (as claimed), so a
// request that was not accepted (429) can be retried with the same key.
func (s *Scheduler) ReleaseIdempotency(ctx context.Context, rule, k, value string) error {
	err := unlockScript.Run(ctx, s.rdb, []string{s.idemKey(rule, k)}, value).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: release idempotency key: %w", err)
	}
	return nil
}

// ClaimIdempotency is ClaimIdempotencyPipe in a round trip of its own: it returns the value
// that owns k (value itself when this claim took it).
func (s *Scheduler) ClaimIdempotency(ctx context.Context, rule, k, value string, ttl time.Duration) (string, error) {
	pipe := s.rdb.Pipeline()
	cmd := s.ClaimIdempotencyPipe(ctx, pipe, rule, k, value, ttl)
	pipe.Exec(ctx)
	switch owner, err := cmd.Result(); {
	case errors.Is(err, redis.Nil):
		return value, nil
	case err != nil:
		return "", fmt.Errorf("queue: claim idempotency key: %w", err)
	default:
		return owner, nil
	}
}
