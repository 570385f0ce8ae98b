package queue

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// claimRounds bounds the round trips of one claim of a partitioned rule: the first visits
// every partition with an even share of the request; the next ones offer what was left
// (workers, total_outflow slots) to the partitions that had more keys due.
const claimRounds = 3

// claimParts claims from a rule in n partitions (p of them current, see partition.go).
//
// Fairness: each call's first round visits every partition (its releases, expired leases,
// its earliest due time) and gives each an equal share of req.Max; the remainder — with
// fewer workers than partitions, all the shares — goes first to the partitions whose
// earliest due key is earliest, as this process last saw them. Up to two more rounds give
// what was not used to the partitions that filled their share and still have keys due,
// earliest first. Within a partition keys are claimed lowest-due-first, as before, so the
// whole is close to lowest-due-first across the rule.
//
// total_outflow: the rule's meter stays one key (partition 0's slot), touched once per call:
// meter.lua reserves up to req.Max slots within the lookahead before the claims, each
// partition's claim takes the first reserved slot at or after each key's due time, and the
// unused tail of the reservation is given back after them (one round trip each, only for
// rules with total_outflow). Unused slots inside the reservation are offered to the other
// partitions in the next round; those still unused after the last round are lost (the rule
// goes slower, never faster, than total_outflow).
func (s *store) claimParts(ctx context.Context, rule string, now time.Time, req ClaimRequest, p, n int) (Claimed, error) {
	rels := make([][]Release, n)
	for _, r := range req.Releases {
		i := PartitionOf(r.Key, p)
		rels[i] = append(rels[i], r)
	}
	total := req.TotalEvery > 0
	every := req.TotalEvery.Microseconds()
	var res reservation
	var free []int64 // reserved slots no key took yet, ascending
	if total {
		refund := s.refunds.take(rule)
		var err error
		res, err = s.meter(ctx, rule, now, req.TotalEvery, req.Max, req.Lookahead, 0, refund, 0, 0)
		if err != nil {
			s.refunds.add(rule, refund)
			return Claimed{}, fmt.Errorf("queue: claim rule %q: total_outflow meter: %w", rule, err)
		}
		free = make([]int64, res.n)
		for j := range free {
			free[j] = res.first + int64(j)*every
		}
	}
	left := req.Max
	if total {
		left = len(free)
	}
	// Lowest due first across partitions, as within one: the first round serves partitions
	// by the earliest due time each had at this process's last claim (ties, and partitions
	// that had none, in an order that rotates from call to call); later rounds by the
	// earliest due time each just answered.
	nexts := s.partNexts(rule, n)
	start := int(s.rr.Add(1) % uint64(n))
	order := make([]int, n)
	for j := range order {
		order[j] = (start + j) % n
	}
	byNext := func(a, b int) int {
		na, nb := nexts[a], nexts[b]
		switch {
		case na == nb:
			return 0
		case na < 0:
			return 1
		case nb < 0:
			return -1
		case na < nb:
			return -1
		default:
			return 1
		}
	}
	slices.SortStableFunc(order, byNext)
	var (
		out      Claimed
		more     = make([]bool, n)
		moving   = map[int][]Claim{}
		firstErr error
		failed   int
		lost     []string // released keys not held in their partition
	)
	if total {
		out.Now = fromUS(res.now)
	}
	for round := 0; round < claimRounds; round++ {
		targets := order
		if round > 0 {
			targets = targets[:0:0]
			for _, i := range order {
				if more[i] {
					targets = append(targets, i)
				}
			}
			if left <= 0 || len(targets) == 0 || (total && len(free) == 0) {
				break
			}
			slices.SortStableFunc(targets, byNext)
		}
		quota := make([]int, len(targets))
		for j := range quota {
			quota[j] = left / len(targets)
			if j < left%len(targets) {
				quota[j]++
			}
		}
		// Slots dealt in turn to the partitions with a share: each gets early and late ones.
		slots := make([][]int64, len(targets))
		if total {
			for j, q := 0, 0; j < len(free) && !allFull(slots, quota); q = (q + 1) % len(targets) {
				if len(slots[q]) < quota[q] {
					slots[q] = append(slots[q], free[j])
					j++
				}
			}
		}
		calls := make([]*call, 0, len(targets))
		idx := make([]int, 0, len(targets))
		share := make(map[int]int, len(targets))
		for j, i := range targets {
			var rs []Release
			if round == 0 {
				rs = rels[i]
			}
			if round > 0 && quota[j] == 0 {
				continue
			}
			nslots := 0 // the meter is not in this slot: never touch it (claim.lua)
			if total {
				nslots = len(slots[j])
			}
			args := make([]any, 0, 9+max(nslots, 0)+6*len(rs))
			args = append(args, usOrZero(now), quota[j], req.Lookahead.Microseconds(), req.Every.Microseconds(),
				req.TotalEvery.Microseconds(), req.Lease.Microseconds(), req.Owner, req.Reclaim, nslots)
			for _, v := range slots[j] {
				args = append(args, v)
			}
			args = appendReleases(args, rs)
			share[i] = quota[j]
			calls = append(calls, &call{script: claimScript, keys: s.part(rule, i).all(), args: args})
			idx = append(idx, i)
		}
		s.runAll(ctx, calls)
		for j, c := range calls {
			i := idx[j]
			got, lostKeys, refunds, err := parseClaimed(c.cmd)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				failed++
				more[i] = false
				if round == 0 {
					// Its releases did not apply: the keys come back when their leases expire.
					out.Lost += len(rels[i])
				}
				continue
			}
			s.refunds.add(rule, refunds)
			out.Lost += got.Lost
			lost = append(lost, lostKeys...)
			if out.Now.IsZero() || got.Now.After(out.Now) {
				out.Now = got.Now
			}
			nexts[i] = -1
			if !got.Next.IsZero() {
				nexts[i] = us(got.Next)
			}
			q := share[i]
			// More keys are due here than its share let it take.
			more[i] = !got.Next.IsZero() && !got.Next.After(got.Now.Add(req.Lookahead)) && len(got.Claims) >= q
			for _, cl := range got.Claims {
				if total {
					if k, ok := slices.BinarySearch(free, us(cl.Slot)); ok {
						free = slices.Delete(free, k, k+1)
					}
				}
				if h := PartitionOf(cl.Key, p); h != i {
					moving[i] = append(moving[i], cl)
					continue
				}
				out.Claims = append(out.Claims, cl)
				left--
			}
			if total {
				for _, cl := range moving[i] { // a moved key's slot stays free
					if k, ok := slices.BinarySearch(free, us(cl.Slot)); !ok {
						free = slices.Insert(free, k, us(cl.Slot))
					}
				}
			}
		}
		if round == 0 && failed == len(calls) {
			return Claimed{}, fmt.Errorf("queue: claim rule %q: %w", rule, firstErr)
		}
		if total {
			left = min(left, len(free))
		}
	}
	if len(moving) > 0 {
		s.move(ctx, rule, p, req.Owner, moving)
	}
	if len(lost) > 0 {
		out.Lost -= s.releaseElsewhere(ctx, rule, p, n, req, lost)
	}
	s.storeNexts(rule, nexts)
	for _, v := range nexts {
		if v >= 0 && (out.Next.IsZero() || v < us(out.Next)) {
			out.Next = fromUS(v)
		}
	}
	if total {
		end := res.first + res.n*every
		// The unused tail of the reservation goes back, unless another claim reserved since.
		to := end
		for k := len(free) - 1; k >= 0 && free[k] == to-every; k-- {
			to = free[k]
		}
		meterAt := end
		if to < end {
			if _, err := s.meter(ctx, rule, now, req.TotalEvery, 0, -1, 0, 0, end, to); err == nil {
				meterAt = to
			}
		}
		if !out.Next.IsZero() && us(out.Next) < meterAt {
			out.Next = fromUS(meterAt)
		}
	}
	return out, nil
}

func allFull(slots [][]int64, quota []int) bool {
	for q := range slots {
		if len(slots[q]) < quota[q] {
			return false
		}
	}
	return true
}

// move takes claimed keys out of partitions that are no longer theirs into their home
// partition under p (see move.lua, adopt.lua), due at the slot their claim had. Best effort:
// a key whose move fails stays claimed where it was and comes back when its lease expires,
// to be moved then.
func (s *store) move(ctx context.Context, rule string, p int, owner string, moving map[int][]Claim) {
	type moved struct {
		cl    Claim
		try   string
		depth int64
	}
	var calls []*call
	var from [][]Claim
	for i, cls := range moving {
		k := s.part(rule, i)
		args := make([]any, 0, 1+3*len(cls))
		args = append(args, owner)
		for _, cl := range cls {
			args = append(args, cl.Key, cl.Fence, depthBucket(cl.Key))
		}
		calls = append(calls, &call{script: moveScript, keys: []string{k.due, k.lease, k.held, k.dirty, k.try, k.depth, k.idle}, args: args})
		from = append(from, cls)
	}
	s.runAll(ctx, calls)
	to := map[int][]moved{}
	for j, c := range calls {
		vals, err := c.cmd.Slice()
		if err != nil || len(vals) != 3*len(from[j]) {
			continue
		}
		for x, cl := range from[j] {
			if ok, _ := vals[3*x].(int64); ok != 1 {
				continue
			}
			st, _ := vals[3*x+1].(string)
			d, _ := vals[3*x+2].(int64)
			h := PartitionOf(cl.Key, p)
			to[h] = append(to[h], moved{cl, st, d})
		}
	}
	calls = calls[:0]
	for h, ms := range to {
		k := s.part(rule, h)
		args := make([]any, 0, 5*len(ms))
		for _, m := range ms {
			args = append(args, m.cl.Key, us(m.cl.Slot), m.try, m.depth, depthBucket(m.cl.Key))
		}
		calls = append(calls, &call{script: adoptScript, keys: []string{k.due, k.lease, k.dirty, k.try, k.depth}, args: args})
	}
	if len(calls) > 0 {
		s.runAll(ctx, calls)
	}
}

// partNexts returns a copy of the earliest due time (µs, -1 none) of each of rule's n
// partitions, as this process's last claim of the rule saw them (0: not known).
func (s *store) partNexts(rule string, n int) []int64 {
	out := make([]int64, n)
	if v, ok := s.nexts.Load(rule); ok {
		copy(out, *v.(*[]int64))
	}
	return out
}

func (s *store) storeNexts(rule string, nexts []int64) { s.nexts.Store(rule, &nexts) }

// releaseElsewhere releases, in the partitions other than their own, the keys of
// req.Releases named in lost: a key claimed before the rule's partition count changed is held
// in its old partition. It returns how many it released (one more round trip, only when a
// release was lost).
func (s *store) releaseElsewhere(ctx context.Context, rule string, p, n int, req ClaimRequest, lost []string) int {
	var rels []Release
	want := make(map[string]bool, len(lost))
	for _, k := range lost {
		want[k] = true
	}
	for _, r := range req.Releases {
		if want[r.Key] {
			rels = append(rels, r)
		}
	}
	again := make(map[int][]int, n)
	for i := range n {
		for j, r := range rels {
			if PartitionOf(r.Key, p) != i {
				again[i] = append(again[i], j)
			}
		}
	}
	held := make([]bool, len(rels))
	s.release(ctx, rule, req.Owner, req.TotalEvery, rels, again, held)
	found := 0
	for _, h := range held {
		if h {
			found++
		}
	}
	return found
}
