package drain

// The own engine's ownership: one loop per drainer renews every rule's partitions in one
// pipelined Redis call (queue.Scheduler.Ownership.Own) every OwnRenew, acquires and gives up
// partitions as the shares move, and stops delivering a partition before its lease can
// expire anywhere.

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/queue"
)

// ownMargin is how long before the lease's end, as measured from when the renewal was sent,
// a drainer stops delivering a partition: it covers clock rate differences and the time a
// cancelled delivery takes to notice.
func (d *Drainer) ownMargin() time.Duration { return max(50*time.Millisecond, d.cfg.OwnLease/10) }

// ownLoop renews ownership every OwnRenew until every delivery has finished, then gives up
// every partition (a soft or hard stop) so other drainers own them at once.
func (d *Drainer) ownLoop() {
	t := time.NewTicker(d.cfg.OwnRenew)
	defer t.Stop()
	// The first renewal only announces this drainer: drainers started together then share
	// the partitions from their second renewal on, instead of the first one taking all and
	// handing half over (which pauses the moved keys for a renewal).
	d.ownAnnounce = true
	d.renewOwn(false)
	d.ownAnnounce = false
	for {
		select {
		case <-t.C:
			d.renewOwn(false)
		case <-d.flushed:
			d.renewOwn(true)
			return
		}
	}
}

// renewOwn sends one renewal for every rule (leave: give everything up).
func (d *Drainer) renewOwn(leave bool) {
	d.ownMu.Lock()
	os := make([]*orule, 0, len(d.orules))
	for _, o := range d.orules {
		os = append(os, o)
	}
	leaving := d.ownLeaving
	d.ownLeaving = nil
	d.ownMu.Unlock()
	now := time.Now()
	reqs := make([]queue.OwnRequest, 0, len(os)+len(leaving))
	for _, o := range os {
		req := queue.OwnRequest{Rule: o.name, Owner: d.cfg.Owner, Partitions: o.n, Lease: d.cfg.OwnLease, Leave: leave,
			PaceTTL: max(time.Minute, 2*d.cfg.OwnLease)}
		if !leave {
			var busy int
			req.Pace, req.GiveUp, busy = o.beforeRenew(now)
			req.InFlight, req.ReportInFlight = busy, o.flightReport(busy)
			req.Steer = o.steerEntriesLocked()
		} else {
			req.ReportInFlight = true // removes this drainer's report
		}
		if d.ownAnnounce {
			req.Max = -1
		}
		reqs = append(reqs, req)
	}
	for _, name := range leaving {
		reqs = append(reqs, queue.OwnRequest{Rule: name, Owner: d.cfg.Owner, Partitions: 1, Lease: d.cfg.OwnLease, Leave: true, ReportInFlight: true})
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), d.cfg.OwnRenew)
	sent := time.Now()
	d.sig.Raise(evRenewSent)
	res := d.cfg.Scheduler.Ownership.Own(ctx, time.Time{}, reqs)
	cancel()
	got := time.Now()
	for i, o := range os {
		if leave {
			o.dropAll()
			o.clearBreaker()
			continue
		}
		o.applyOwned(res[i], sent, got)
		o.flightReported(reqs[i], res[i])
		o.refreshBreaker(got)
	}
	for i := len(os); i < len(reqs); i++ {
		if res[i].Err != nil {
			d.log.Warn("could not give up a removed rule's partitions: they are free once their leases expire", "rule", reqs[i].Rule, "err", res[i].Err)
		}
	}
	if leave {
		d.log.Info("own engine: partitions given up", "rules", len(os))
	}
	d.sig.Raise(evRenewed)
}

// beforeRenew returns the pacing a new owner needs (keys whose next allowed time is still
// ahead, on Redis's clock) per owned partition, the surplus partitions that have no
// delivery in flight any more (given up by this renewal), and how many keys have a delivery
// at a worker now (the admin API's in_flight, reported with the renewal).
func (o *orule) beforeRenew(now time.Time) (map[int]map[string]time.Time, []int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var pace map[int]map[string]time.Time
	var giveUp []int
	busy := map[int]bool{}
	inFlight := 0
	for _, k := range o.keys {
		if k.running > 0 {
			inFlight++
		}
		// A delete sent without waiting is part of the delivery: a new owner reads the key
		// from its head, and its direct get can overtake the old owner's delete (the get is
		// answered on the server's read loop, the delete through the JetStream API queue), so
		// a partition with a delete in flight is not given up yet.
		if k.running > 0 || k.pendingDel > 0 {
			busy[k.part.p] = true
		}
		if k.tat.After(now) {
			if pace == nil {
				pace = map[int]map[string]time.Time{}
			}
			m := pace[k.part.p]
			if m == nil {
				m = map[string]time.Time{}
				pace[k.part.p] = m
			}
			m[k.key] = k.tat.Add(o.offset)
		}
	}
	for p, part := range o.parts {
		if part.releasing && !busy[p] {
			giveUp = append(giveUp, p)
		}
		if pace[p] == nil && part.paced {
			if pace == nil {
				pace = map[int]map[string]time.Time{}
			}
			pace[p] = map[string]time.Time{} // clears what an earlier renewal wrote
		}
		part.paced = pace[p] != nil && len(pace[p]) > 0
	}
	return pace, giveUp, inFlight
}

// flightRefresh: a report of keys in flight that has not changed is sent again this many
// renewals later while it is not 0 (a few seconds), in case another drainer removed it
// while this one's announcement had lapsed (a Redis outage longer than a lease).
const flightRefresh = 8

// flightReport says whether this renewal reports the keys in flight, n: when the count
// changed since the last report, or a non-zero count is due for a refresh. A drainer at
// rest reports nothing, one busy costs one script per rule and renewal at most.
func (o *orule) flightReport(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flight.age++
	if n == o.flight.sent && (n == 0 || o.flight.age < flightRefresh) {
		return false
	}
	o.flight.sent, o.flight.age = n, 0
	return true
}

// flightReported notes a failed report (or renewal): the next renewal reports again.
func (o *orule) flightReported(req queue.OwnRequest, res queue.Owned) {
	if !req.ReportInFlight || (res.Err == nil && res.InFlightErr == nil) {
		return
	}
	o.mu.Lock()
	o.flight.sent = -1
	o.mu.Unlock()
	if res.InFlightErr != nil && res.Err == nil && o.d.redisLog.allow() {
		o.d.log.Warn("own engine: keys in flight not reported (the admin API's in_flight is stale until the next renewal)", "rule", o.name, "err", res.InFlightErr)
	}
}

// applyOwned acts on a renewal's answer: extends deadlines, starts owning new partitions,
// stops owning those no longer ours.
func (o *orule) applyOwned(res queue.Owned, sent, got time.Time) {
	d := o.d
	if res.Err != nil {
		d.m.renewFails.WithLabelValues(o.name).Inc()
		if d.redisLog.allow() {
			d.log.Error("ownership renewal failed: partitions stop delivering when their leases run out", "rule", o.name, "err", res.Err, "lease", d.cfg.OwnLease)
		}
		return
	}
	if res.Mismatch > 0 {
		// Owning partitions under two counts would own the same keys twice: this drainer
		// owns none of the rule's until the drainers agree (docs/design.md "Ownership").
		d.m.partsDiff.WithLabelValues(o.name).Set(1)
		if d.ownMismatchLog.allow() {
			d.log.Error("own engine: -own-partitions differs from the other drainers': this drainer owns none of the rule's partitions until they agree (stop the drainers with the other count, or restart this one with it)",
				"rule", o.name, "own_partitions", o.n, "other_drainers", res.Mismatch)
		}
	} else {
		d.m.partsDiff.WithLabelValues(o.name).Set(0)
	}
	margin := d.ownMargin()
	deadline := sent.Add(d.cfg.OwnLease - margin)
	var acquired []*opart
	o.mu.Lock()
	o.offset = res.Now.Sub(got)
	o.members = res.Members
	o.rank = res.Rank
	now := time.Now()
	for p, fence := range res.Fences {
		part := o.parts[p]
		if part != nil && part.fence == fence && !part.lost {
			if deadline.After(part.deadline) {
				part.deadline = deadline
				part.timer.Reset(deadline.Sub(now))
			}
		} else {
			if part != nil {
				o.dropPart(part, "fence changed")
			}
			if deadline.Sub(now) < margin {
				continue // the answer came too late to use this lease; the next renewal will do
			}
			ctx, cancel := context.WithCancel(d.runCtx)
			part = &opart{p: p, fence: fence, deadline: deadline, ctx: ctx, cancel: cancel}
			pp := part
			part.timer = time.AfterFunc(deadline.Sub(now), func() { o.lapse(pp) })
			o.parts[p] = part
			acquired = append(acquired, part)
		}
		if res.Surplus[p] && !part.releasing {
			part.releasing = true // no new dispatch; given up once its deliveries are done
		}
	}
	for p, part := range o.parts {
		if _, ok := res.Fences[p]; !ok {
			o.dropPart(part, "no longer owned")
		}
	}
	owned := len(o.parts)
	o.mu.Unlock()
	d.m.partsOwned.WithLabelValues(o.name).Set(float64(owned))
	if len(acquired) > 0 {
		ps := make([]int, len(acquired))
		for i, a := range acquired {
			ps[i] = a.p
		}
		slices.Sort(ps)
		d.log.Info("own engine: partitions acquired", "rule", o.name, "partitions", ps, "owned", owned, "drainers", res.Members)
		go o.acquire(acquired)
	}
	if o.repairDue(now) {
		go o.repair()
	}
	o.mu.Lock()
	emptied := o.emptied
	o.emptied = nil
	o.mu.Unlock()
	if len(emptied) > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), d.cfg.OwnRenew)
		if err := d.cfg.Scheduler.Ownership.ForgetDue(ctx, o.name, emptied); err != nil && d.redisLog.allow() {
			d.log.Warn("own engine: due marks of emptied keys not removed (harmless: only the claim engine reads them)", "rule", o.name, "err", err)
		}
		cancel()
	}
}

// lapse runs when a partition's deadline passes: unless a renewal extended it meanwhile,
// the partition is dropped (its deliveries cancelled) before its lease can expire in Redis.
func (o *orule) lapse(part *opart) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if part.lost || time.Now().Before(part.deadline) {
		return
	}
	o.d.m.lost.WithLabelValues(o.name).Inc()
	o.d.log.Warn("ownership lease not renewed in time: stopped delivering the partition before another drainer may own it",
		"rule", o.name, "partition", part.p, "fence", part.fence)
	o.dropPart(part, "lease lapsed")
}

// dropPart forgets a partition: its deliveries are cancelled, its keys leave the heap.
// Caller holds o.mu.
func (o *orule) dropPart(part *opart, why string) {
	if part.lost {
		return
	}
	part.lost = true
	part.cancel()
	part.timer.Stop()
	if o.parts[part.p] == part {
		delete(o.parts, part.p)
	}
	for key, k := range o.keys {
		if k.part != part {
			continue
		}
		if k.idx >= 0 {
			heap.Remove(&o.heap, k.idx)
		}
		if k.running == 0 {
			delete(o.keys, key)
		}
	}
	o.d.log.Debug("own engine: partition dropped", "rule", o.name, "partition", part.p, "why", why)
}

func (o *orule) dropAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, part := range o.parts {
		o.dropPart(part, "stop")
	}
	o.d.m.partsOwned.WithLabelValues(o.name).Set(0)
}

// acquire readies newly owned partitions: the pacing and retry states the previous owner
// left, then every key with messages (the stream's subject list), which are scheduled.
func (o *orule) acquire(parts []*opart) {
	d := o.d
	ctx, cancel := context.WithTimeout(d.runCtx, time.Minute)
	defer cancel()
	// A previous owner whose lease expired stopped dispatching at least ownMargin before the
	// expiry, so before now − margin; its last dispatches after its last renewal are in no
	// pace entry. Holding every key until now − margin + 1/outflow keeps such a key's
	// spacing across the handover.
	acquired := time.Now()
	gap := max(0, d.cfg.Policy(o.rule.Load()).Outflow.Every-d.ownMargin())
	ps := make([]int, len(parts))
	set := map[int]bool{}
	for i, part := range parts {
		ps[i] = part.p
		set[part.p] = true
	}
	var hold time.Time      // local: no key of these partitions before it
	o.restoreSteer(ctx, ps) // a throttled key goes on at its lowered outflow
	paces, err := d.cfg.Scheduler.Ownership.Paces(ctx, o.name, ps)
	if err != nil {
		// Without the previous owner's pacing, wait a lease before the first delivery: no
		// key can then go faster than its outflow.
		d.log.Warn("own engine: previous owner's pacing unreadable: the partitions' keys wait one lease before their first delivery", "rule", o.name, "partitions", ps, "err", err)
		hold = time.Now().Add(d.cfg.OwnLease)
	}
	retries, err := d.cfg.Scheduler.Ownership.OwnRetries(ctx, o.name, set, o.n)
	if err != nil {
		d.log.Warn("own engine: retry states unreadable: failed heads count their attempts from 0", "rule", o.name, "err", err)
	}
	keys, err := d.cfg.Queues.Keys(ctx, o.name)
	if err != nil && d.natsLog.allow() {
		d.log.Warn("own engine: cannot list the stream's keys: known keys only until the next repair", "rule", o.name, "err", err)
	}
	o.mu.Lock()
	now := time.Now()
	for key := range keys {
		o.learnQuiet(key)
	}
	for _, part := range parts {
		if part.lost {
			continue
		}
		part.ready = true
	}
	for _, k := range o.keys {
		if !k.part.ready || k.part.lost || k.running > 0 || k.idx >= 0 {
			continue
		}
		if !slices.Contains(parts, k.part) {
			continue
		}
		if t, ok := paces[k.key]; ok {
			k.tat = maxTime(k.tat, t.Add(-o.offset))
		}
		k.tat = maxTime(k.tat, hold)
		k.tat = maxTime(k.tat, acquired.Add(gap))
		if st, ok := retries[k.key]; ok {
			s := st
			k.retry = &s
		}
		o.schedule(k, maxTime(k.tat, now))
	}
	o.mu.Unlock()
	o.poke()
}

// learnQuiet records key (of an owned partition) without scheduling it. Caller holds o.mu.
func (o *orule) learnQuiet(key string) {
	part := o.parts[queue.OwnPartitionOf(key, o.n)]
	if part == nil || o.keys[key] != nil {
		return
	}
	o.keys[key] = &okey{key: key, part: part, idx: -1}
}

func (o *orule) offsetNow() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.offset
}

func (o *orule) repairDue(now time.Time) bool {
	if o.d.cfg.RepairEvery <= 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.repairAt.IsZero() {
		o.repairAt = now.Add(o.d.cfg.RepairEvery)
		return false
	}
	if now.Before(o.repairAt) {
		return false
	}
	o.repairAt = now.Add(o.d.cfg.RepairEvery)
	return true
}

// repair lists the stream's keys and schedules those of owned partitions that are not known:
// a lost notice delays a key by at most RepairEvery (plus the listing's time).
func (o *orule) repair() {
	d := o.d
	ctx, cancel := context.WithTimeout(d.runCtx, time.Minute)
	defer cancel()
	keys, err := d.cfg.Queues.Keys(ctx, o.name)
	if err != nil {
		if d.natsLog.allow() {
			d.log.Warn("own engine: repair listing failed", "rule", o.name, "err", err)
		}
		return
	}
	n := 0
	o.mu.Lock()
	now := time.Now()
	for key := range keys {
		part := o.parts[queue.OwnPartitionOf(key, o.n)]
		if part == nil || !part.ready {
			continue
		}
		if k := o.keys[key]; k != nil && (k.running > 0 || k.idx >= 0) {
			continue
		}
		o.learn(key, now)
		n++
	}
	o.mu.Unlock()
	if n > 0 {
		d.log.Info("own engine: repair found keys with messages that were not scheduled (lost notices?)", "rule", o.name, "keys", n)
		o.poke()
	}
}
