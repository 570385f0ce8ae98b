package bucket

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed limits.lua
var limitsLua string

var limitsScript = redis.NewScript(limitsLua)

// noMember is ARGV[4] when no limit is a log: boxed once, compared by identity.
var noMember any = ""

// RedisConfig configures a Redis store. The zero value is ready to use.
type RedisConfig struct {
	// Prefix starts every key the store writes. It must not contain '{' or '}' (the
	// store adds its own hash tag after it). Default "sl:".
	Prefix string
	// TTLSlack is added to every key's expiry, so callers whose clocks run behind
	// Redis's by up to this much never see their state expire early. Default 1s.
	TTLSlack time.Duration
	// Batch is the most overlapping decisions sent together in one pipeline (each is
	// still its own EVALSHA, or INCRBY and PEXPIRE; see batch.go). Default 64; 1 sends every decision on its
	// own. Batching needs a client with Pipeline (Client, ClusterClient, Ring).
	Batch int
	// Pipelines is the most batches in flight at once (besides one decision sent on
	// its own). More help when Redis and the client have cores to spare. Default 1: a
	// single pipeline gathers what was queued while its last batch was out, so batches
	// are larger — on two cores with 16 concurrent callers, 2 pipelines cost 9.5 µs of
	// client and 11 µs of Redis CPU per decision, 1 (with its yield, batch.go) 7 and
	// 9.6 µs, at 64 callers the two were alike.
	Pipelines int
}

// WithDefaults returns c with every zero field set to its default.
func (c RedisConfig) WithDefaults() RedisConfig {
	if c.Prefix == "" {
		c.Prefix = "sl:"
	}
	if c.TTLSlack <= 0 {
		c.TTLSlack = time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.Pipelines <= 0 {
		c.Pipelines = 1
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c RedisConfig) Validate() error {
	if strings.ContainsAny(c.Prefix, "{}") {
		return fmt.Errorf("%w: redis prefix %q contains a brace", ErrInvalid, c.Prefix)
	}
	if c.TTLSlack < 0 {
		return fmt.Errorf("%w: negative TTLSlack", ErrInvalid)
	}
	return nil
}

// Redis is a Store that keeps state in Redis, shared by every process that uses the
// same Redis and prefix. Each decision is one EVALSHA of limits.lua (EVAL only the
// first time a server has not seen the script), or INCRBY and PEXPIRE for a lone
// fixed window that counts over (countover.go); overlapping decisions share a
// pipeline (see RedisConfig.Batch). Safe for concurrent use; needs no Close.
//
// It sets no timeout of its own: bound it with ctx (a decision waiting in a batch
// always honours it; one sent on its own only with the client's
// ContextTimeoutEnabled) and the client's Dial/Read/Write timeouts, or wrap it in a
// Degraded store.
type Redis struct {
	c        redis.Scripter
	pipe     pipeliner  // c, when it can pipeline
	queue    chan *call // nil when batching is off
	batch    int
	inflight atomic.Int32 // decisions under way, to skip batching when alone

	maxPipelines int32
	pipelines    atomic.Int32 // pipeline goroutines running

	prefix   string
	slackArg any // TTLSlack in ms (an int64), boxed once rather than on every call
	nonce    string
	seq      atomic.Uint64
}

// NewRedis returns a Redis store using c (a *redis.Client, *redis.ClusterClient or
// *redis.Ring). For throughput, give the client a PoolSize at least as large as the
// number of goroutines deciding at once.
func NewRedis(c redis.Scripter, cfg RedisConfig) (*Redis, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("bucket: nonce: %w", err)
	}
	s := &Redis{c: c, prefix: cfg.Prefix, slackArg: cfg.TTLSlack.Milliseconds(), nonce: hex.EncodeToString(b[:])}
	if p, ok := c.(pipeliner); ok {
		s.pipe = p // also without batching: a count-over decision is two commands
		if cfg.Batch > 1 {
			s.batch, s.maxPipelines = cfg.Batch, int32(cfg.Pipelines)
			s.queue = make(chan *call, cfg.Batch*cfg.Pipelines)
		}
	}
	return s, nil
}

// Keys returns the Redis keys that hold key's state for limits, in order:
// Prefix + "{" + key + "}:" + algorithm code + interval in ms, e.g. "sl:{m-42}:tb1000"
// (plus "#i" when two limits share an algorithm and interval). Keys are for
// operators and tests; Allow builds the same names. A key whose only limit is a fixed
// window that counts over keeps a counter per window instead, named by this name, ":c"
// and the window (countover.go).
func (s *Redis) Keys(key string, limits []Limit) ([]string, error) {
	var ps [MaxLimits]params
	if err := validate(limits, 0, 1, &ps); err != nil {
		return nil, err
	}
	return s.keys(key, ps[:len(limits)]), nil
}

func (s *Redis) keys(key string, ps []params) []string {
	// One buffer for every name: all limits share the "<prefix>{<key>}:" head, and
	// the hash tag in it puts them in one cluster slot.
	per := len(s.prefix) + len(key) + 3 + 2 + 20 + 4
	buf := make([]byte, 0, per*len(ps))
	ends := [MaxLimits]int{}
	for i := range ps {
		buf = append(buf, s.prefix...)
		buf = append(buf, '{')
		buf = append(buf, key...)
		buf = append(buf, '}', ':')
		buf = append(buf, algCodes[ps[i].alg]...)
		buf = strconv.AppendInt(buf, ps[i].ivl, 10)
		if ps[i].loc != nil {
			buf = append(buf, '@')
			buf = append(buf, ps[i].loc.String()...)
		}
		for j := 0; j < i; j++ {
			if ps[j].alg == ps[i].alg && ps[j].ivl == ps[i].ivl && sameZone(ps[j].loc, ps[i].loc) {
				buf = append(buf, '#')
				buf = strconv.AppendInt(buf, int64(i), 10)
				break
			}
		}
		ends[i] = len(buf)
	}
	all := string(buf)
	keys := make([]string, len(ps))
	start := 0
	for i := range ps {
		keys[i], start = all[start:ends[i]], ends[i]
	}
	return keys
}

// Allow implements Store: one call of limits.lua, or INCRBY and PEXPIRE for a key whose
// only limit is a fixed window that counts over (countover.go); either gives four values
// per limit, read alike.
func (s *Redis) Allow(ctx context.Context, key string, limits []Limit, n int64, now time.Time) (Result, error) {
	var res Result
	var ps [MaxLimits]params
	t := now.UnixMilli()
	if err := validate(limits, n, t, &ps); err != nil {
		return res, err
	}
	if len(limits) == 0 {
		res.Allowed, res.Index = true, -1
		return res, nil
	}
	var vals []int64
	var err error
	if s.pipe != nil && countOverOnly(limits, ps[:1]) {
		var one [4]int64
		one, err = s.countOver(ctx, key, &ps[0], n, t)
		vals = one[:]
	} else {
		vals, err = s.script(ctx, key, limits, ps[:len(limits)], n, t)
	}
	if err != nil {
		return res, fmt.Errorf("bucket: redis: %w", err)
	}
	if len(vals) != 4*len(limits) {
		return res, fmt.Errorf("bucket: redis: script returned %d values for %d limits", len(vals), len(limits))
	}
	res.N = len(limits)
	for i := range limits {
		d, v := &res.Decisions[i], vals[4*i:]
		d.Allowed = v[0] == 1
		d.Limit = ps[i].burst
		d.Window = ms(ps[i].window())
		d.Remaining = v[1]
		d.RetryAfter = ms(v[2])
		d.ResetAfter = ms(v[3])
	}
	res.finish(limits)
	return res, nil
}

// script decides limits (validated into ps, at t in ms) with one call of limits.lua.
func (s *Redis) script(ctx context.Context, key string, limits []Limit, ps []params, n, t int64) ([]int64, error) {
	var member any = noMember
	args := make([]any, 4, 4+4*len(limits))
	for i := range limits {
		p := &ps[i]
		code := int64(p.alg)
		if limits[i].Shadow {
			code += 8
		}
		if limits[i].CountOver {
			code += 16
		}
		if p.alg == algLog && member == noMember {
			// Members of the log must be unique across calls and processes.
			member = s.nonce + ":" + strconv.FormatUint(s.seq.Add(1), 36) + ":"
		}
		if p.alg == algZoned {
			// the window of now, computed here: interval = its length, burst = its start
			args = append(args, code, p.rate, p.wl, p.ws)
			continue
		}
		args = append(args, code, p.rate, p.ivl, p.burst)
	}
	args[0], args[1], args[2], args[3] = t, n, s.slackArg, member
	return s.run(ctx, s.keys(key, ps), args)
}
