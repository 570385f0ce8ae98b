package bucket

// The algorithm cores: pure functions of (params, state, now) in integer milliseconds.
// limits.lua is a line-by-line port of this file; the conformance suite and the
// differential test keep the two in step. Every algorithm answers the same four
// questions, which is all a store needs:
//
//	advance(st, now)      the state as it is at now (refills, rolled windows)
//	room(st, now)         how many hits would pass right now
//	consume(st, n, now)   the state after counting n hits (only called when n ≤ room)
//	wait(st, k, now)      ms until room ≥ k (0 if already; -1 if never)
//
// How long a state stays meaningful (its TTL in Redis, when the memory store may drop
// it) follows from the same formulas: limits.lua computes it exactly on every write;
// the memory store keeps a cheaper upper bound (slot.idle).
// All intermediate values stay below 2^53 (checked by Limit.params), so the same
// arithmetic in Lua's doubles is exact.

// state is one limit's state for one key. Field meaning depends on the algorithm;
// the zero value is "no state" (a full bucket, an empty window) for all of them.
//
//	token bucket:  a = tokens × ivl (fixed point), b = last update (ms); b == 0 means full
//	leaky bucket:  a = water level × ivl (fixed point), b = last update (ms)
//	fixed window:  a = window number (now / ivl), b = hits in it
//	zoned fixed window: a = the window's start (ms), b = hits in it
//	window counter: a = window number, b = hits in the previous window, c = hits in this one
//
// The sliding window log keeps its timestamps elsewhere (a ring in memory, a sorted
// set in Redis) and uses no state.
type state struct{ a, b, c int64 }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// advance brings st to now. A clock that runs backwards (now earlier than the state)
// never refills or rolls anything back: the newer state wins, which can only deny
// more, never admit more.
func advance(p *params, st state, now int64) state {
	switch p.alg {
	case algToken:
		full := p.burst * p.ivl
		if st.b == 0 {
			return state{a: full, b: now}
		}
		st.a = min(st.a, full) // the burst may have been lowered since
		if now > st.b {
			if el := now - st.b; el > full/p.rate {
				st.a = full
			} else {
				st.a = min(full, st.a+el*p.rate)
			}
			st.b = now
		}
	case algLeaky:
		if now > st.b {
			if el := now - st.b; el > st.a/p.rate {
				st.a = 0
			} else {
				st.a -= el * p.rate
			}
			st.b = now
		}
	case algFixed:
		if w := now / p.ivl; w > st.a {
			st = state{a: w}
		}
	case algZoned:
		if p.ws > st.a {
			st = state{a: p.ws}
		}
	case algCounter:
		if w := now / p.ivl; w == st.a+1 {
			st = state{a: w, b: st.c}
		} else if w > st.a {
			st = state{a: w}
		}
	}
	return st
}

// elapsed is how far now is into the window of st (clamped for backwards clocks).
func elapsed(p *params, st *state, now int64) int64 {
	return max(0, min(p.ivl-1, now-st.a*p.ivl))
}

func room(p *params, st *state, now int64) int64 {
	switch p.alg {
	case algToken:
		return st.a / p.ivl
	case algLeaky:
		return max(0, (p.burst*p.ivl-st.a)/p.ivl) // the burst may have been lowered since
	case algFixed, algZoned:
		return max(0, p.rate-st.b)
	case algCounter:
		return max(0, p.rate-st.c-st.b*(p.ivl-elapsed(p, st, now))/p.ivl)
	}
	return 0
}

func consume(p *params, st state, n int64) state {
	switch p.alg {
	case algToken:
		st.a -= n * p.ivl
	case algLeaky:
		st.a += n * p.ivl
	case algFixed, algZoned:
		st.b += n
	case algCounter:
		st.c += n
	}
	return st
}

// wait returns the ms until room(st) ≥ k, assuming no other hits; -1 for never.
func wait(p *params, st *state, k, now int64) int64 {
	if k > p.burst {
		return -1 // burst == rate for the windows
	}
	switch p.alg {
	case algToken:
		return max(0, ceilDiv(k*p.ivl-st.a, p.rate))
	case algLeaky:
		return max(0, ceilDiv(st.a+k*p.ivl-p.burst*p.ivl, p.rate))
	case algFixed:
		if st.b+k <= p.rate {
			return 0
		}
		return (st.a+1)*p.ivl - now
	case algZoned:
		if st.b+k <= p.rate {
			return 0
		}
		return st.a + p.wl - now
	case algCounter:
		return waitCounter(p, st, k, now)
	}
	return 0
}

// waitCounter: the estimate is cur + ⌊prev × (ivl − e) / ivl⌋ at e ms into the window.
// It only falls as e grows, so the answer is the first e at which it is low enough,
// in this window, the next (prev = cur), or the one after (empty).
func waitCounter(p *params, st *state, k, now int64) int64 {
	el := elapsed(p, st, now)
	if a := p.rate - k - st.c; a >= 0 {
		// ⌊prev·(ivl−e)/ivl⌋ ≤ a  ⇔  prev·(ivl−e) < (a+1)·ivl  ⇔  e ≥ ivl − ⌊((a+1)·ivl − 1)/prev⌋
		e := int64(0)
		if st.b > 0 {
			e = p.ivl - ((a+1)*p.ivl-1)/st.b
		}
		if e < p.ivl {
			return max(0, e-el)
		}
	}
	toNext := p.ivl - el
	if st.c == 0 {
		return toNext
	}
	if e := p.ivl - ((p.rate-k+1)*p.ivl-1)/st.c; e < p.ivl {
		return toNext + max(0, e)
	}
	return toNext + p.ivl
}

// window is the policy window (RateLimit-Policy w=) and limit the quota (q=).
func (p *params) window() int64 {
	if p.alg == algToken || p.alg == algLeaky {
		return ceilDiv(p.burst*p.ivl, p.rate)
	}
	if p.alg == algZoned {
		return p.wl // this window's own length: 23 or 25 hours across a DST change
	}
	return p.ivl
}

// ring is the sliding window log of one key in memory: the timestamps (ms) of the
// hits in the current window, oldest first. It grows by doubling up to rate entries
// and never beyond, so a key's memory is bounded by its limit.
type ring struct {
	buf  []int64
	head int
	n    int
}

func (r *ring) at(i int) int64 { return r.buf[(r.head+i)&(len(r.buf)-1)] }

// expire drops the hits that left the window (now − ivl, now].
func (r *ring) expire(ivl, now int64) {
	for r.n > 0 && r.at(0) <= now-ivl {
		r.head = (r.head + 1) & (len(r.buf) - 1)
		r.n--
	}
}

func (r *ring) push(ts int64, n int64) {
	if need := r.n + int(n); need > len(r.buf) {
		size := max(8, len(r.buf))
		for size < need {
			size *= 2
		}
		buf := make([]int64, size)
		for i := 0; i < r.n; i++ {
			buf[i] = r.at(i)
		}
		r.buf, r.head = buf, 0
	}
	if r.n > 0 {
		// Keep the log sorted when the caller's clock steps back: the hit is logged at
		// the newest time seen, so it expires late rather than early (never over-admits).
		ts = max(ts, r.at(r.n-1))
	}
	for ; n > 0; n-- {
		r.buf[(r.head+r.n)&(len(r.buf)-1)] = ts
		r.n++
	}
}

// logWait is wait for the log: the (count + k − rate)-th oldest hit must leave.
func (r *ring) wait(p *params, k, now int64) int64 {
	if k > p.rate {
		return -1
	}
	i := r.n + int(k) - int(p.rate)
	if i <= 0 {
		return 0
	}
	return r.at(i-1) + p.ivl - now
}
