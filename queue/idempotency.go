package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// 55-byte id, plus the digest's 22 (MEMORY USAGE, as TestTakeIdempotencyKey measures it), kept
// for the TTL whatever happens to the message.
//
// A request takes its idempotency key (TakeIdempotencyKey): the word "claim" is kept for a
// drainer's lease on a key (Claim), a different thing.

// IdempotencyValue is what a take stores: the message id, and digest when not empty.
func IdempotencyValue(id, digest string) string {
	if digest == "" {
		return id
	}
	return id + " " + digest
}

// SplitIdempotencyValue returns the id and the digest of a take's value; digest is ""
// for a value stored without one (or by a version before digests).
func SplitIdempotencyValue(v string) (id, digest string) {
	id, digest, _ = strings.Cut(v, " ")
	return id, digest
}

// ScopedIdempotencyKey is idempotency key k as caller's own (the submit token's name, with
// -submit-tokens): two callers' keys never meet, so one can neither take over, learn the
// message id of, nor be answered with another's message. It is the k a take and a release
// are made with:
//
//	<prefix>sl:{t}:idem:\xff<len(caller)>:<caller>:<k>
//
// A caller's own key is valid UTF-8 (the ingress refuses anything else), so it never
// begins with the byte 0xff: a scoped key is never a caller's unscoped one, and the length
// makes (caller, k) readable back whatever the two hold. A scoped take also reads the
// unscoped key k (an entry of a version or a mode that did not scope, still in its TTL):
// see IdempotencyTake.Result.
func ScopedIdempotencyKey(caller, k string) string {
	return scopeMark + strconv.Itoa(len(caller)) + ":" + caller + ":" + k
}

// scopeMark begins a scoped idempotency key: a byte no UTF-8 string holds.
const scopeMark = "\xff"

// unscopedKey is the caller's own key k of a scoped key; ok is false for an unscoped one.
func unscopedKey(scoped string) (k string, ok bool) {
	rest, ok := strings.CutPrefix(scoped, scopeMark)
	if !ok {
		return "", false
	}
	n, rest, ok := strings.Cut(rest, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ':' {
		return "", false
	}
	return rest[l+1:], true
}

func (s *store) idemKey(rule, k string) string {
	return s.prefix + "sl:{" + RuleToken(rule) + "}:idem:" + k
}

// takeIdempotencyKeyPipe queues, on a pipeline the caller executes, the take of idempotency
// key k of rule for value (a message id, or IdempotencyValue): SET NX GET with the TTL. Once
// the pipeline has run, the take's Result is the value that already owned the key, or
// redis.Nil when this take took it.
//
// With SchedulerConfig.LegacyIdempotency the take is made in v0.3's layout instead
// (legacyIdem), the one key every version then takes, so a repeat is recognised whichever
// version took it first, and two takes never race across two keys. The current layout is
// read in the same pipeline (for the owner's request digest) and written once the take took
// the key, so it holds every key taken meanwhile when the option is turned off.
func (s *store) takeIdempotencyKeyPipe(ctx context.Context, pipe redis.Pipeliner, rule, k, value string, ttl time.Duration) *IdempotencyTake {
	c := &IdempotencyTake{s: s, rule: rule, k: k, value: value, ttl: ttl}
	if own, ok := unscopedKey(k); ok {
		c.unscoped = pipe.Get(ctx, s.idemKey(rule, own))
	}
	if !s.legacyIdem {
		c.cur = pipe.SetArgs(ctx, s.idemKey(rule, k), value, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
		return c
	}
	id, _ := SplitIdempotencyValue(value)
	c.legacy = pipe.SetArgs(ctx, s.legacyIdemKey(rule, k), id, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
	c.curValue = pipe.Get(ctx, s.idemKey(rule, k))
	return c
}

// An IdempotencyTake is a take queued by takeIdempotencyKeyPipe.
type IdempotencyTake struct {
	s              *store
	rule, k, value string
	ttl            time.Duration
	cur, legacy    *redis.StatusCmd
	curValue       *redis.StringCmd // legacy mode: the current layout's value, for its digest
	unscoped       *redis.StringCmd // a scoped take: the unscoped key's value (ScopedIdempotencyKey)
}

// Result returns the value that owns the key, or redis.Nil when this take took it.
//
// A scoped take that took its key (ScopedIdempotencyKey) is answered with the unscoped
// key's owner instead when that owner's request digest is this take's: the same domain,
// descriptor and payload under the same key, sent before the ingress scoped keys (an
// upgrade, or -submit-tokens turned on) — the caller's retry of a message already
// accepted, which must not be stored twice. The scoped key is then set to that owner, so
// later repeats find it there. An unscoped owner of another request (another caller's, or
// other work) is not looked at: it is neither answered nor named.
func (c *IdempotencyTake) Result() (string, error) {
	owner, err := c.result()
	if c.unscoped == nil || !errors.Is(err, redis.Nil) {
		return owner, err
	}
	prior, perr := c.unscoped.Result()
	_, digest := SplitIdempotencyValue(c.value)
	if _, priorDigest := SplitIdempotencyValue(prior); perr != nil || digest == "" || priorDigest != digest {
		return owner, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ttl := c.s.rdb.PTTL(ctx, c.s.idemKey(c.rule, c.unscopedK())).Val()
	if ttl <= 0 {
		ttl = c.ttl
	}
	c.s.rdb.Set(ctx, c.s.idemKey(c.rule, c.k), prior, ttl)
	if c.s.legacyIdem {
		id, _ := SplitIdempotencyValue(prior)
		c.s.rdb.Set(ctx, c.s.legacyIdemKey(c.rule, c.k), id, ttl)
	}
	return prior, nil
}

func (c *IdempotencyTake) unscopedK() string {
	k, _ := unscopedKey(c.k)
	return k
}

func (c *IdempotencyTake) result() (string, error) {
	if c.legacy == nil {
		return c.cur.Result()
	}
	owner, err := c.legacy.Result()
	switch {
	case errors.Is(err, redis.Nil):
		// Taken: the current layout gets it too, before the admission goes on (a repeat
		// on an ingress without the option must find it). A failure here is no double
		// admission: every ingress with the option takes the legacy key.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.s.rdb.Set(ctx, c.s.idemKey(c.rule, c.k), c.value, c.ttl)
		return "", redis.Nil
	case err != nil:
		return "", err
	}
	// Owned: the legacy layout holds the bare id; the current one, when the owner wrote it,
	// also its request's digest.
	if v, err := c.curValue.Result(); err == nil {
		if id, _ := SplitIdempotencyValue(v); id == owner {
			return v, nil
		}
	}
	return owner, nil
}

// legacyIdemKey is v0.3's layout of an idempotency key: <prefix>sl:idem:{<rule>}:<k>, holding
// the bare message id.
func (s *store) legacyIdemKey(rule, k string) string {
	return s.prefix + "sl:idem:{" + rule + "}:" + k
}

// ReleaseIdempotency removes the mapping of k if it still holds value (as taken), so a
// request that was not accepted (429) can be retried with the same key.
func (s Idempotency) Release(ctx context.Context, rule, k, value string) error {
	err := unlockScript.Run(ctx, s.rdb, []string{s.idemKey(rule, k)}, value).Err()
	if s.legacyIdem && (err == nil || errors.Is(err, redis.Nil)) {
		id, _ := SplitIdempotencyValue(value)
		err = unlockScript.Run(ctx, s.rdb, []string{s.legacyIdemKey(rule, k)}, id).Err()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: release idempotency key: %w", err)
	}
	return nil
}

// TakeIdempotencyKey is takeIdempotencyKeyPipe in a round trip of its own: it returns the value
// that owns k (value itself when this take took it).
func (s Idempotency) Take(ctx context.Context, rule, k, value string, ttl time.Duration) (string, error) {
	pipe := s.rdb.Pipeline()
	cmd := s.takeIdempotencyKeyPipe(ctx, pipe, rule, k, value, ttl)
	pipe.Exec(ctx)
	switch owner, err := cmd.Result(); {
	case errors.Is(err, redis.Nil):
		return value, nil
	case err != nil:
		return "", fmt.Errorf("queue: take idempotency key: %w", err)
	default:
		return owner, nil
	}
}
