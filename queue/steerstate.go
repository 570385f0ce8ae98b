package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Steering state the drainers share (the own engine's delivery.adaptive and sink.breaker),
// in the rule's ownership slot ({<rule token>.own}):
//
//	<prefix>sl:{T.own}:breaker  HASH  drainer -> BreakerRecord (JSON); written by a drainer
//	                                  when its breaker changes state (and refreshed while
//	                                  it is not closed), read by the admin API
//	<prefix>sl:{T.own}:steer:<p> HASH key -> the key's adaptive state (opaque to this
//	                                  package), written with the pace entries at renewal
//	                                  for throttled keys only, read by a partition's new owner
//
// Neither is written per message: a breaker changes state at most once per cool-down, and
// the adaptive entries ride on the renewal that writes pace entries anyway.

// BreakerRecord is one drainer's sink breaker of a rule, as it last published it.
type BreakerRecord struct {
	Drainer string `json:"drainer"`
	// State is "closed", "half_open" or "open".
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// NextProbe is when an open breaker lets its next probe delivery go (zero otherwise).
	NextProbe time.Time `json:"next_probe,omitzero"`
	// Expires: a record not refreshed by then is ignored (its drainer stopped or died).
	Expires time.Time `json:"expires"`
}

func (s *store) breakerKey(rule string) string { return s.ownKey(rule, "breaker") }

// setBreakerScript writes one drainer's record and extends the hash's life to it, never
// shortening it (another drainer's record may last longer).
var setBreakerScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
local want = tonumber(ARGV[3])
if ttl < want then redis.call('PEXPIRE', KEYS[1], want) end
return 1`)

// SetBreaker publishes a drainer's breaker state of rule; it is shown until rec.Expires
// unless written again. The hash lives as long as its longest-lived record.
func (s Steering) SetBreaker(ctx context.Context, rule string, rec BreakerRecord) error {
	ttl := time.Until(rec.Expires).Milliseconds()
	if ttl <= 0 {
		return nil // expired already: nothing to show
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := setBreakerScript.Run(ctx, s.rdb, []string{s.breakerKey(rule)}, rec.Drainer, b, ttl).Err(); err != nil {
		return fmt.Errorf("queue: breaker state of rule %q: %w", rule, err)
	}
	return nil
}

// ClearBreaker removes a drainer's breaker record of rule (it stopped draining the rule).
func (s Steering) ClearBreaker(ctx context.Context, rule, drainer string) error {
	if err := s.rdb.HDel(ctx, s.breakerKey(rule), drainer).Err(); err != nil {
		return fmt.Errorf("queue: breaker state of rule %q: %w", rule, err)
	}
	return nil
}

// Breakers reads the drainers' breaker records of rule that have not expired at now
// (one HGETALL; a handful of fields, one per drainer).
func (s Steering) Breakers(ctx context.Context, rule string, now time.Time) ([]BreakerRecord, error) {
	m, err := s.rdb.HGetAll(ctx, s.breakerKey(rule)).Result()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("queue: breaker states of rule %q: %w", rule, err)
	}
	out := make([]BreakerRecord, 0, len(m))
	for _, v := range m {
		var rec BreakerRecord
		if json.Unmarshal([]byte(v), &rec) != nil || !rec.Expires.After(now) {
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

func (s *store) steerKey(rule string, p int) string {
	return s.ownKey(rule, "steer:"+strconv.Itoa(p))
}

// SteerStates reads the per-key steering states previous owners of partitions parts left
// (OwnRequest.Steer), in one pipelined round trip.
func (s Steering) SteerStates(ctx context.Context, rule string, parts []int) (map[string]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.HGetAll(ctx, s.steerKey(rule, p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("queue: steering states of rule %q: %w", rule, err)
	}
	out := map[string]string{}
	for _, c := range cmds {
		for k, v := range c.Val() {
			out[k] = v
		}
	}
	return out, nil
}

// writeSteer queues the replacement of rule's steering entries of partition p (an empty
// map clears them) on pipe.
func (s *store) writeSteer(ctx context.Context, pipe redis.Pipeliner, rule string, p int, keys map[string]string, ttl time.Duration) {
	k := s.steerKey(rule, p)
	pipe.Del(ctx, k)
	if len(keys) == 0 {
		return
	}
	args := make([]any, 0, 2*len(keys))
	for key, v := range keys {
		args = append(args, key, v)
	}
	pipe.HSet(ctx, k, args...)
	pipe.PExpire(ctx, k, ttl)
}
