package bucket

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"time"
)

// MemoryConfig configures a Memory store. The zero value is ready to use.
type MemoryConfig struct {
	// Shards is the number of independently locked maps, rounded up to a power of two.
	// More shards mean less lock contention between goroutines. Default 128.
	Shards int
	// SweepInterval is how often (in the callers' time, the now passed to Allow) each
	// shard drops the keys whose state has become equivalent to no state, so memory
	// follows the live keys rather than every key ever seen. A sweep walks its shard
	// under the shard's lock (tens of ns per key), so with millions of keys raise
	// Shards to keep each pause short. Default 1 minute.
	SweepInterval time.Duration
	// MaxLogRate is the largest Rate accepted for a SlidingWindowLog limit, which keeps
	// one timestamp per hit in the window. Default 100_000 (at most ~1 MiB per key).
	MaxLogRate int64
}

// WithDefaults returns c with every zero field set to its default.
func (c MemoryConfig) WithDefaults() MemoryConfig {
	if c.Shards <= 0 {
		c.Shards = 128
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Minute
	}
	if c.MaxLogRate <= 0 {
		c.MaxLogRate = 100_000
	}
	return c
}

// Memory is a Store that keeps state in this process. Safe for concurrent use.
// Create it with NewMemory.
type Memory struct {
	seed   maphash.Seed
	mask   uint64
	sweep  int64 // ms
	maxLog int64
	shards []shard
}

type shard struct {
	mu        sync.Mutex
	keys      map[uint64]*entry // by the key's seeded hash; colliding keys chain via next
	n         int               // keys held
	nextSweep int64             // ms, callers' time
	_         [32]byte          // pad to 64 bytes: neighbouring shards' locks on separate cache lines
}

// entry is one key's state across its limits.
type entry struct {
	key      string
	next     *entry // another key with the same 64-bit hash (rare)
	expireAt int64  // ms; from then on every slot is as good as empty
	slots    []slot
}

type slot struct {
	p      params
	st     state
	log    *ring         // SlidingWindowLog only
	window time.Duration // p.window(), cached: divisions are a good part of a decision's cost
	idle   int64         // ms; an upper bound of idle() right after a commit, cached likewise
}

// NewMemory returns a Memory store configured by cfg (zero fields take defaults).
func NewMemory(cfg MemoryConfig) *Memory {
	cfg = cfg.WithDefaults()
	n := 1 << bits.Len(uint(cfg.Shards-1))
	m := &Memory{
		seed:   maphash.MakeSeed(),
		mask:   uint64(n - 1),
		sweep:  cfg.SweepInterval.Milliseconds(),
		maxLog: cfg.MaxLogRate,
		shards: make([]shard, n),
	}
	for i := range m.shards {
		m.shards[i].keys = make(map[uint64]*entry)
	}
	return m
}

// Allow implements Store. It never blocks on I/O and ignores ctx.
func (m *Memory) Allow(_ context.Context, key string, limits []Limit, n int64, now time.Time) (res Result, err error) {
	var ps [MaxLimits]params
	t := now.UnixMilli()
	if err := validate(limits, n, t, &ps); err != nil {
		return res, err
	}
	if len(limits) == 0 {
		res.Allowed, res.Index = true, -1
		return res, nil
	}
	for i := range limits {
		if ps[i].alg == algLog && ps[i].rate > m.maxLog {
			return res, fmt.Errorf("%w: sliding_window_log rate %d above MemoryConfig.MaxLogRate %d", ErrInvalid, ps[i].rate, m.maxLog)
		}
	}
	// One hash picks the shard and the map slot, so the key is hashed once.
	h := maphash.String(m.seed, key)
	sh := &m.shards[h&m.mask]
	sh.mu.Lock()
	e := sh.keys[h]
	for e != nil && e.key != key {
		e = e.next
	}
	if e == nil {
		// Clone: the caller's string may share a large buffer we must not pin.
		e = &entry{key: strings.Clone(key), next: sh.keys[h], slots: make([]slot, len(limits))}
		sh.keys[h] = e
		sh.n++
	} else if len(e.slots) != len(limits) {
		e.slots = make([]slot, len(limits))
	}
	fresh := e.expireAt <= t
	m.decide(e, &res, limits, ps[:len(limits)], n, t, fresh)
	if t >= sh.nextSweep {
		sh.sweepLocked(t)
		sh.nextSweep = t + m.sweep
	}
	sh.mu.Unlock()
	return res, nil
}

// decide runs the algorithms over every limit of e, commits when allowed, and fills res.
func (m *Memory) decide(e *entry, res *Result, limits []Limit, ps []params, n, t int64, fresh bool) {
	var sts [MaxLimits]state
	var rooms [MaxLimits]int64
	res.N = len(ps)
	for i := range ps {
		s := &e.slots[i]
		if fresh || !s.p.sameLimit(&ps[i]) {
			// A new key, idle state, or a limit whose parameters changed: start empty.
			s.p, s.st = ps[i], state{}
			if s.log != nil {
				s.log.n, s.log.head = 0, 0
			}
			s.window = ms(s.p.window())
			switch s.p.alg {
			case algToken, algLeaky:
				s.idle = s.p.window() // from empty to full, or full to empty
			case algCounter:
				s.idle = 2 * s.p.ivl // this window and the next, which weighs it
			default:
				s.idle = s.p.ivl
			}
		}
		if s.p.alg == algZoned {
			s.p.ws, s.p.wl = ps[i].ws, ps[i].wl
			s.window = ms(s.p.wl)
		}
		p := &s.p
		if p.alg == algLog {
			if s.log == nil {
				s.log = &ring{}
			}
			s.log.expire(p.ivl, t)
			rooms[i] = p.rate - int64(s.log.n)
		} else {
			sts[i] = advance(p, s.st, t)
			rooms[i] = room(p, &sts[i], t)
		}
		d := &res.Decisions[i]
		d.Allowed = n <= rooms[i]
		if limits[i].CountOver {
			// envoy: over once the count passes the limit, which a peek (n = 0) sees too
			d.Allowed = sts[i].b+n <= p.rate
		}
		d.Limit = p.burst
		d.Window = s.window
	}
	ok := true // every enforced limit allows: count the hits (all-or-nothing)
	for i := range ps {
		if !limits[i].Shadow && !res.Decisions[i].Allowed {
			ok = false
		}
	}
	var ttl int64
	for i := range ps {
		s, d := &e.slots[i], &res.Decisions[i]
		p := &s.p
		commit := n > 0 && ((ok && d.Allowed) || limits[i].CountOver)
		rem := rooms[i]
		if commit {
			rem = max(0, rem-n)
		}
		d.Remaining = rem
		if p.alg == algLog {
			if !d.Allowed {
				d.RetryAfter = ms(s.log.wait(p, n, t))
			}
			if commit {
				s.log.push(t, n)
			}
			if rem < p.rate {
				d.ResetAfter = ms(s.log.wait(p, rem+1, t))
			}
			if commit {
				ttl = max(ttl, s.log.at(s.log.n-1)+p.ivl-t)
			}
			continue
		}
		if !d.Allowed {
			d.RetryAfter = ms(wait(p, &sts[i], n, t))
		}
		if commit {
			s.st = consume(p, sts[i], n)
		}
		st := &sts[i]
		if commit {
			st = &s.st
		}
		if rem < p.burst {
			d.ResetAfter = ms(wait(p, st, rem+1, t))
		}
		if commit {
			if p.alg == algZoned {
				ttl = max(ttl, max(s.st.a, p.ws)+p.wl-t) // to this window's end
			} else {
				ttl = max(ttl, s.idle)
			}
		}
	}
	if ttl > 0 {
		e.expireAt = max(e.expireAt, t+ttl)
	}
	res.finish(limits)
}

// Sweep drops every key whose state has become equivalent to no state by now and
// returns how many it dropped. Allow already sweeps each shard every SweepInterval;
// Sweep is for callers that want to free memory at a moment of their choosing.
func (m *Memory) Sweep(now time.Time) int {
	t, dropped := now.UnixMilli(), 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		dropped += sh.sweepLocked(t)
		sh.mu.Unlock()
	}
	return dropped
}

func (sh *shard) sweepLocked(t int64) int {
	dropped := 0
	for h, head := range sh.keys {
		// Unlink the idle entries of the chain; usually it has one.
		var keep *entry
		for e := head; e != nil; {
			next := e.next
			if e.expireAt <= t {
				dropped++
			} else {
				e.next, keep = keep, e
			}
			e = next
		}
		if keep == nil {
			delete(sh.keys, h)
		} else if keep != head {
			sh.keys[h] = keep
		}
	}
	sh.n -= dropped
	return dropped
}

// Len returns the number of keys currently held (live or not yet swept).
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// validate checks the arguments shared by every store and converts the limits.
func validate(limits []Limit, n, now int64, ps *[MaxLimits]params) error {
	if n < 0 {
		return ErrNegativeHits
	}
	if now <= 0 {
		return ErrBadTime
	}
	if len(limits) > MaxLimits {
		return ErrTooManyLimits
	}
	for i := range limits {
		var err error
		if ps[i], err = limits[i].params(); err != nil {
			return err
		}
		if p := &ps[i]; p.alg == algZoned {
			s, e := zoneWindow(p.loc, p.ivl, now)
			p.ws, p.wl = s, e-s
		}
	}
	return nil
}
