package bucket

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Envoy's counting without a script. A key whose only limit is a fixed window that
// counts over (Limit.CountOver: envoyproxy/ratelimit's semantics, the hits counted
// whatever the answer) needs no read-decide-write: its count after the call says
// everything. The Redis store then keeps one counter per window, as envoy does —
// "<prefix>{<key>}:fw<interval>:c<window>" (the window's index since the epoch, or the
// start in ms of a zoned window), an integer — and a decision is INCRBY plus PEXPIRE
// (GET when n is 0) in the batch's pipeline instead of an EVALSHA of limits.lua: on
// redis-server about a fifth of the script's CPU. The answers are the script's, to the
// unit (the conformance suite runs both stores through the same steps). One difference
// in state only: a caller whose clock lags into the previous window counts there (as
// envoy's), where the script keeps counting in the newest window it has seen.

// countOverOnly reports whether limits decide as a lone count-over fixed window.
func countOverOnly(limits []Limit, ps []params) bool {
	return len(limits) == 1 && limits[0].CountOver && (ps[0].alg == algFixed || ps[0].alg == algZoned)
}

// windowOf returns the window of now (ms) for a fixed or zoned fixed window p: an id that
// names it in its key, and its end.
func (p *params) windowOf(now int64) (id, end int64) {
	if p.alg == algZoned {
		return p.ws, p.ws + p.wl
	}
	w := now / p.ivl
	return w, (w + 1) * p.ivl
}

// counterKey is the Redis key of the count-over window id of key.
func (s *Redis) counterKey(key string, p *params, id int64) string {
	b := make([]byte, 0, len(s.prefix)+len(key)+48)
	b = append(b, s.prefix...)
	b = append(b, '{')
	b = append(b, key...)
	b = append(b, '}', ':')
	b = append(b, algCodes[p.alg]...)
	b = strconv.AppendInt(b, p.ivl, 10)
	if p.loc != nil {
		b = append(b, '@')
		b = append(b, p.loc.String()...)
	}
	b = append(b, ':', 'c')
	b = strconv.AppendInt(b, id, 10)
	return string(b)
}

// countOverVals answers as limits.lua does for a lone count-over fixed window whose count
// is count after this call (n hits added; n = 0 peeks): allowed, remaining, retry_after and
// reset_after in ms (-1: never).
func countOverVals(p *params, count, n, now, end int64) [4]int64 {
	var v [4]int64
	r := p.rate
	if count <= r {
		v[0] = 1
	} else if n > p.burst {
		v[2] = -1
	} else {
		v[2] = end - now
	}
	v[1] = max(0, r-count)
	if v[1] < p.burst {
		v[3] = end - now
	}
	return v
}

// countOver decides a lone count-over fixed window (countOverOnly) with INCRBY and
// PEXPIRE, batched with the other decisions in flight like a script call.
func (s *Redis) countOver(ctx context.Context, key string, p *params, n, now int64) ([4]int64, error) {
	id, end := p.windowOf(now)
	c := &call{counter: s.counterKey(key, p, id), n: n, ttl: max(1, end-now) + s.slack}
	var err error
	if s.queue == nil || s.inflight.Add(1) == 1 {
		if s.queue != nil {
			defer s.inflight.Add(-1)
		}
		pipe := s.pipe.Pipeline()
		incr, get := c.queueCounter(ctx, pipe)
		_, _ = pipe.Exec(ctx)
		c.count, err = counterReply(incr, get)
	} else {
		c.count, err = s.enqueue(ctx, c)
	}
	if err != nil {
		return [4]int64{}, err
	}
	return countOverVals(p, c.count, n, now, end), nil
}

// queueCounter queues a counter call's commands on pipe: INCRBY and PEXPIRE, or GET to peek.
func (c *call) queueCounter(ctx context.Context, pipe redis.Pipeliner) (*redis.IntCmd, *redis.StringCmd) {
	if c.n == 0 {
		return nil, pipe.Get(ctx, c.counter)
	}
	incr := pipe.IncrBy(ctx, c.counter, c.n)
	pipe.PExpire(ctx, c.counter, msDuration(c.ttl))
	return incr, nil
}

// counterReply reads a counter call's count from its commands (a missing key counts 0).
func counterReply(incr *redis.IntCmd, get *redis.StringCmd) (int64, error) {
	if incr != nil {
		return incr.Result()
	}
	v, err := get.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
