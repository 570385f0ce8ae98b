package drain

// The own engine (Config.Engine = EngineOwn): Redis arbitrates who owns which keys; it is not
// on the path of each message. A drainer owns whole ownership partitions of each rule
// (queue.Scheduler.Ownership.Own: a lease per partition, renewed for every rule in one pipelined call),
// learns of work from a core NATS subscription to the rule's subjects and from the stream's
// subject list (on acquisition and every RepairEvery), paces its keys in memory (GCRA per key
// in one heap per rule, one timer per rule) and hands due keys to a fixed pool of workers
// that pop (direct get), deliver and delete. See docs/design.md "The own engine".

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/internal/adaptive"
	"github.com/sluice-io/sluice/internal/backoff"
	"github.com/sluice-io/sluice/internal/breaker"
	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/spacing"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/internal/window"
	"github.com/sluice-io/sluice/queue"
)

// Engines (Config.Engine).
const (
	// EngineClaim claims keys one by one from Redis (claim.lua): the engine of v0.3.
	EngineClaim = "claim"
	// EngineOwn owns whole partitions and paces keys in memory (own.go).
	EngineOwn = "own"
)

// recheckEmpty: a key whose pop found nothing within recheckWindow of a notice is popped
// again this much later (a core NATS notice may arrive before the stream stored the
// message), up to recheckTimes times; after that only the repair listing finds it.
const (
	recheckEmpty  = 20 * time.Millisecond
	recheckWindow = 500 * time.Millisecond
	recheckTimes  = 5
)

// okey is one key of an owned partition, known to have (or have had) messages.
type okey struct {
	key  string
	part *opart
	// tat is the key's theoretical arrival time (local clock): its next message may not leave
	// before it (GCRA without burst).
	tat time.Time
	// at is the key's place in the heap (when it may next be dispatched); idx its index
	// there, -1 when out of the heap (idle, or at a worker).
	at  time.Time
	idx int
	// running: deliveries of the key at workers (up to delivery.max_in_flight; while it is
	// below that the key may stay in the heap). noticed: a notice arrived while running.
	running    int
	drained    bool       // a pop found the key empty: no more dispatches until running ends
	popMu      sync.Mutex // serializes the key's pops (several deliveries take distinct messages)
	noticed    bool
	lastNotice time.Time
	rechecks   int
	retry      *queue.RetryState // head's failures (strict ordering), mirrored in Redis
	// after is the sequence of the last message of the key this drainer handled: the next
	// pop reads the first message after it, so a delete still on its way (async) is never
	// read again. pendingDel counts those deletes; emptied: the last pop found nothing, and
	// the key stays known only until its deletes are answered.
	after      uint64
	pendingDel int
	// every: the key's interval when it was last dispatched (0: no per-key outflow).
	every time.Duration
	// lastStart: when the key's last delivery was handed to the sink (delivery.spacing:
	// strict keeps the next one at least every after it).
	lastStart time.Time
	// brkWait: the key waits for the rule's breaker (not a retry's backoff or a window):
	// breakerClosed brings it forward. Guarded by o.mu.
	brkWait bool
	emptied bool
}

// opart is one ownership partition this drainer holds.
type opart struct {
	p     int
	fence int64
	// deadline (local clock): the lease surely lasts until then (renewal sent + lease −
	// margin). No delivery starts after it; ctx is cancelled when it passes unrenewed.
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	timer    *time.Timer
	lost     bool
	// ready: the previous owner's pacing is loaded (acquire); keys are not dispatched before.
	ready bool
	// releasing: the renewal said the partition is surplus; nothing new is dispatched and it
	// is given up once its deliveries are done.
	releasing bool
	paced     bool // a renewal wrote pace entries for it (the next one must clear them)
	steered   bool // a renewal wrote adaptive entries for it (own_steerstate.go)
}

type keyHeap []*okey

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *keyHeap) Push(x any)        { k := x.(*okey); k.idx = len(*h); *h = append(*h, k) }
func (h *keyHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.idx = -1
	return k
}

// orule is one rule drained by the own engine.
type orule struct {
	d    *Drainer
	name string
	n    int // ownership partitions
	rule atomicRule
	quit chan struct{}
	wake chan struct{} // cap 1

	mu       sync.Mutex
	parts    map[int]*opart
	keys     map[string]*okey
	heap     keyHeap
	busy     int // keys at workers
	members  int
	rank     int
	inflight map[*job]struct{} // deliveries at workers
	swept    time.Time
	offset   time.Duration // Redis's clock − local clock at the last renewal
	emptied  []string      // keys that emptied: their due marks are removed at the next renewal
	repairAt time.Time
	// flight: the keys in flight this drainer last reported with a renewal, and how many
	// renewals ago (flightReport); sent -1: the last report failed.
	flight struct{ sent, age int }

	// total_outflow slots reserved from the rule's meter (local clock): first, first+every, …
	tot struct {
		first time.Time
		every time.Duration
		n     int
	}

	work chan *job
	// sinkFreed (cap 1): a delivery gave its sink.max_in_flight slot back (ownSlotsNeeded).
	sinkFreed chan struct{}
	sub       *nats.Subscription
	// Steering state (delivery.adaptive, sink.breaker): one of each per rule, rebuilt when
	// the rule's options change (steer).
	steerMu sync.Mutex
	lim     *adaptive.Limiter
	limCfg  adaptive.Config
	brk     *breaker.Breaker
	brkCfg  breaker.Config
	pub     brkPub // the breaker's published state (own_steerstate.go)
	// stopKeys ends the subscription to per-key override changes (nil: none).
	stopKeys func()
}

type atomicRule struct {
	mu sync.Mutex
	r  *rules.Rule
}

func (a *atomicRule) Load() *rules.Rule   { a.mu.Lock(); defer a.mu.Unlock(); return a.r }
func (a *atomicRule) Store(r *rules.Rule) { a.mu.Lock(); a.r = r; a.mu.Unlock() }

func (o *orule) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// schedule puts k in the heap at t (or moves it there). Caller holds o.mu.
func (o *orule) schedule(k *okey, t time.Time) {
	k.at = t
	if k.idx >= 0 {
		heap.Fix(&o.heap, k.idx)
		return
	}
	heap.Push(&o.heap, k)
}

// learn records that key has work (a notice or the repair listing). Caller holds o.mu.
func (o *orule) learn(key string, now time.Time) {
	p := queue.OwnPartitionOf(key, o.n)
	part := o.parts[p]
	if part == nil {
		return
	}
	k := o.keys[key]
	if k == nil {
		k = &okey{key: key, part: part, idx: -1}
		o.keys[key] = k
	}
	k.rechecks = 0
	k.lastNotice = now
	k.emptied = false
	if k.running > 0 {
		k.noticed = true
		return
	}
	if k.idx < 0 && part.ready && !part.releasing {
		o.schedule(k, maxTime(k.tat, now))
	}
}

// manageOwn keeps one orule per queue rule, following Config.Rules, and renews ownership.
func (d *Drainer) manageOwn() {
	defer d.loops.Done()
	var ruleLoops sync.WaitGroup
	defer ruleLoops.Wait()
	t := time.NewTicker(d.cfg.RulesEvery)
	defer t.Stop()
	d.renewers.Add(1)
	go func() { defer d.renewers.Done(); d.ownLoop() }()
	defer func() {
		d.ownMu.Lock()
		for _, o := range d.orules {
			close(o.quit)
		}
		d.ownMu.Unlock()
	}()
	for {
		seen := map[string]bool{}
		for _, r := range d.cfg.Rules() {
			if r == nil || !r.HasQueue() {
				continue
			}
			seen[r.Name] = true
			d.ownMu.Lock()
			o, ok := d.orules[r.Name]
			if !ok {
				o = &orule{d: d, name: r.Name, n: d.cfg.OwnPartitions, quit: make(chan struct{}), wake: make(chan struct{}, 1),
					parts: map[int]*opart{}, keys: map[string]*okey{}, work: make(chan *job, d.cfg.Workers), inflight: map[*job]struct{}{},
					sinkFreed: make(chan struct{}, 1)}
				d.orules[r.Name] = o
			}
			o.rule.Store(r)
			d.ownMu.Unlock()
			if !ok {
				if err := o.subscribe(); err != nil {
					d.log.Error("own engine: cannot subscribe to the rule's subjects: new work is found by the repair listing only",
						"rule", r.Name, "err", err, "repair_every", d.cfg.RepairEvery)
				}
				if sub, ok := d.cfg.KeyOverrides.(keyOverrideSubscriber); ok {
					name := r.Name
					o.stopKeys = sub.Subscribe(func(rule, key string) {
						if rule == name {
							go o.keyChanged(key) // the index's goroutine must not wait for o.mu
						}
					})
				}
				ruleLoops.Add(1)
				go func() { defer ruleLoops.Done(); o.run() }()
				d.log.Info("draining rule", "rule", r.Name, "engine", EngineOwn, "partitions", o.n)
			}
		}
		d.ownMu.Lock()
		for name, o := range d.orules {
			if !seen[name] {
				close(o.quit)
				delete(d.orules, name)
				d.ownLeaving = append(d.ownLeaving, name)
				d.m.depth.DeleteLabelValues(name)
				d.brkM.Forget(name)
				d.log.Info("rule gone: no longer draining it", "rule", name)
			}
		}
		d.ownMu.Unlock()
		d.sig.Raise(evRulesPolled)
		select {
		case <-t.C:
		case <-d.soft:
			return
		case <-d.runCtx.Done():
			return
		}
	}
}

// subscribe listens to the rule's subjects: every publish to a key tells its owner the key
// has work. A notice that is lost (slow consumer, reconnect) delays the key until the next
// repair listing (RepairEvery), never strands it.
func (o *orule) subscribe() error {
	nc := o.d.cfg.Queues.Conn()
	if nc == nil {
		return errors.New("no NATS connection")
	}
	sub, err := nc.Subscribe(o.d.cfg.Queues.RuleSubjects(o.name), func(m *nats.Msg) {
		key, ok := o.d.cfg.Queues.KeyOfSubject(o.name, m.Subject)
		if !ok || o.d.dropNotices.Load() {
			return
		}
		o.mu.Lock()
		o.learn(key, time.Now())
		o.mu.Unlock()
		o.poke()
	})
	if err != nil {
		return err
	}
	// Notices are small and handled in µs; a deep buffer rides out a burst of admissions.
	_ = sub.SetPendingLimits(1<<20, 256<<20)
	o.sub = sub
	return nil
}

// run is the rule's pacer: it hands due keys of owned partitions to the workers, no faster
// than each key's outflow and the rule's total_outflow, while workers are free.
func (o *orule) run() {
	d := o.d
	var workers sync.WaitGroup
	for range d.cfg.Workers {
		workers.Add(1)
		d.inflight.Add(1)
		go func() { defer d.inflight.Done(); defer workers.Done(); o.worker() }()
	}
	defer func() {
		close(o.work)
		if o.stopKeys != nil {
			o.stopKeys()
		}
		if o.sub != nil {
			_ = o.sub.Unsubscribe()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-o.quit:
			return
		default:
		}
		if d.stopping() {
			return
		}
		r := o.rule.Load()
		pol := d.cfg.Policy(r)
		if pol.Outflow.Every > 0 {
			d.m.outflow.WithLabelValues(r.Name).Set(float64(time.Second) / float64(pol.Outflow.Every))
		}
		wait := 200 * time.Millisecond // pause and live tuning are read at least this often
		o.sweep(r, time.Now())
		if !pol.Paused {
			wait = min(wait, o.dispatch(r, pol))
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-o.wake:
				if !timer.Stop() {
					<-timer.C
				}
			case <-o.quit:
				return
			case <-d.soft:
				return
			case <-d.runCtx.Done():
				return
			}
		}
	}
}

// dispatch hands every due key to a worker while workers (and the rule's share of
// sink.max_in_flight) are free, and returns how long to wait for the next one.
func (o *orule) dispatch(r *rules.Rule, pol Policy) time.Duration {
	d := o.d
	limit := d.cfg.Workers
	if r.Sink.MaxInFlight > 0 {
		share, _ := o.sinkShare(r.Sink.MaxInFlight)
		limit = min(limit, share)
	}
	if pol.Outflow.TotalEvery > 0 {
		if n := o.needSlots(time.Now()); n > 0 {
			o.reserve(pol.Outflow.TotalEvery, n)
		}
	}
	// The rule's steering (adaptive limiter, breaker) is the same for every key of this
	// round: looked up once, not per dispatched key.
	lim, brk := o.steer(r)
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.heap) > 0 {
		now := time.Now()
		k := o.heap[0]
		if w := k.at.Sub(now); w > 0 {
			return w
		}
		if o.busy >= limit {
			return 200 * time.Millisecond // a worker's return pokes
		}
		if k.part.lost || k.part.releasing || !now.Before(k.part.deadline) {
			heap.Pop(&o.heap)
			continue // the partition is being lost or given up: its keys go with it
		}
		// The key's override (sluice tune --key) is read at every dispatch: an in-memory
		// lookup, so a change is obeyed at the key's next slot (and re-times a waiting key
		// at once through keyChanged).
		every := pol.Outflow.Every
		if ko, ok := o.keyOverride(r.Name, k.key, now); ok {
			if ko.Paused {
				// Held where it is (order kept); looked at again within keyPausedRecheck, or
				// at once when its override changes.
				o.schedule(k, now.Add(keyPausedRecheck))
				continue
			}
			if !ko.Outflow.Zero() {
				every = ko.Outflow.Every()
			}
		}
		if lim != nil {
			// delivery.adaptive: the key's outflow as the sink's answers left it (never
			// above the configured one), and a sink's Retry-After holds the key.
			every = lim.Every(k.key, every)
			if h := lim.HeldUntil(k.key); h.After(now) {
				o.schedule(k, h)
				continue
			}
		}
		if brk != nil {
			if u := brk.Until(); u.After(now) {
				k.brkWait = true
				o.schedule(k, u) // sink.breaker open: the rule's keys wait for its probe
				continue
			}
		}
		strict := r.Delivery.Spacing == rules.SpacingStrict
		if next := spacing.NextSlot(k.tat, k.lastStart, now, every, strict); strict && next.After(now) {
			// delivery.spacing strict: never closer than every to the previous actual start
			// (which a late delivery pushed back), not merely on the GCRA grid.
			o.schedule(k, next)
			continue
		}
		slot := maxTime(k.tat, now)
		if pol.Outflow.TotalEvery > 0 {
			o.tot.every = pol.Outflow.TotalEvery
			// A slot that passed unused (no key was ready) is not used late: late slots taken
			// back to back would be a burst above total_outflow.
			for o.tot.n > 0 && now.Sub(o.tot.first) > max(o.tot.every/2, 10*time.Millisecond) {
				o.tot.first = o.tot.first.Add(o.tot.every)
				o.tot.n--
			}
			if o.tot.n == 0 {
				return 5 * time.Millisecond // reserving more (next round)
			}
			if w := o.tot.first.Sub(now); w > 0 {
				return w
			}
			o.tot.first = o.tot.first.Add(o.tot.every)
			o.tot.n--
		}
		heap.Pop(&o.heap)
		k.brkWait = false
		// GCRA: a key dispatched late by no more than timer jitter keeps its grid (a late timer
		// does not lower its outflow); later than that (the key waited for its own previous
		// delivery), its next slot counts from now, or the next would follow right behind it.
		switch {
		case every <= 0:
		case now.Sub(k.tat) < every:
			k.tat = maxTime(k.tat.Add(every), now.Add(every-gridSlack(every)))
		default:
			k.tat = now.Add(every)
		}
		k.every = every
		d.m.lag.WithLabelValues(r.Name).Observe(max(0, now.Sub(slot).Seconds()))
		k.running++
		k.noticed = false
		o.busy++
		j := &job{k: k, since: now}
		o.inflight[j] = struct{}{}
		o.work <- j // never blocks: at most Workers deliveries are at workers
		// Several deliveries of one key at once (relaxed ordering): the key stays in the heap
		// at its next slot until max_in_flight of them run.
		if mx := maxInFlight(r); mx > 1 && k.running < mx && !k.drained {
			o.schedule(k, k.tat)
		}
	}
	return time.Hour
}

// sinkShare is this drainer's part of the rule's sink.max_in_flight: the cap split over the
// live drainers (max/N each, one more for the first max mod N by name), so the parts add up
// to the cap. With fewer slots than drainers (redis) the deliveries take Redis slots
// instead, which hold the rule-wide cap: the share is then the whole cap (ownSlotsNeeded,
// docs/design.md).
func (o *orule) sinkShare(max int) (share int, redis bool) {
	o.mu.Lock()
	n, rank := o.members, o.rank
	o.mu.Unlock()
	if n > max {
		return max, true
	}
	if n <= 1 {
		return max, false
	}
	share = max / n
	if rank < max%n {
		share++
	}
	return share, false
}

// reserveAhead is how far ahead the own engine reserves total_outflow slots.
const reserveAhead = 200 * time.Millisecond

// needSlots is how many total_outflow slots to reserve: none while some are left, else one
// per key due within reserveAhead, so drainers share the rule's outflow in proportion to
// their waiting keys (each key gets its fair share, whichever drainer owns it).
func (o *orule) needSlots(now time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tot.n > 0 {
		return 0
	}
	horizon := now.Add(reserveAhead)
	n := 0
	for _, k := range o.heap {
		if !k.at.After(horizon) {
			n++
		}
	}
	return n
}

// reserve takes one total_outflow slot per waiting key (want, at most 1000) from the rule's
// meter: one Redis call for many deliveries. The meter hands out slots in request order
// without a horizon, so each drainer gets slots in proportion to its waiting keys and every
// key its fair share, whichever drainer owns it. Slots a drainer does not use are lost (the
// meter does not go back), which only lowers the rule's outflow while keys run dry.
func (o *orule) reserve(every time.Duration, want int) {
	const ahead = -1 // no horizon
	count := max(1, min(want, 1000))
	ctx, cancel := context.WithTimeout(o.d.runCtx, time.Second)
	defer cancel()
	sent := time.Now()
	now, first, n, err := o.d.cfg.Scheduler.Meter.Reserve(ctx, o.name, every, count, ahead)
	if err != nil {
		o.d.redisFailed(o.name, err)
		return
	}
	o.mu.Lock()
	o.tot.first = sent.Add(first.Sub(now))
	o.tot.every = every
	o.tot.n = n
	o.mu.Unlock()
}

// job is one delivery handed to a worker.
type job struct {
	k         *okey
	since     time.Time
	abandoned bool // it outlived its deadline: its worker was replaced (sweep)
}

// worker delivers the heads of the keys the pacer hands it, one at a time.
func (o *orule) worker() {
	for j := range o.work {
		k := j.k
		next, ok := o.deliver(k)
		o.mu.Lock()
		delete(o.inflight, j)
		if j.abandoned {
			// The sweep gave this delivery up and moved the key on: its outcome was acted on
			// (a message the sink accepted is deleted), nothing else.
			o.mu.Unlock()
			return // a new worker took this one's place
		}
		k.running--
		o.busy--
		now := time.Now()
		if ok && !k.part.lost && !k.part.releasing {
			if next.IsZero() {
				// Empty: no more dispatches of the key; the last of its deliveries decides.
				k.drained = true
				if k.idx >= 0 {
					heap.Remove(&o.heap, k.idx)
				}
			}
			if k.drained {
				if k.running > 0 {
					o.mu.Unlock()
					o.poke()
					continue
				}
				k.drained = false
				next = time.Time{} // the key emptied: as below
			}
		}
		switch {
		case !ok || k.part.lost:
			if o.keys[k.key] == k && k.part.lost {
				delete(o.keys, k.key)
			}
		case k.part.releasing:
			// kept out of the heap: the partition is given up at the next renewal
		case next.IsZero(): // empty
			switch {
			case k.noticed: // a message arrived during the pop
				k.noticed = false
				o.schedule(k, maxTime(k.tat, now))
			case now.Sub(k.lastNotice) < recheckWindow && k.rechecks < recheckTimes:
				// The notice may have come before the stream stored its message.
				k.rechecks++
				o.schedule(k, maxTime(k.tat, now.Add(recheckEmpty)))
			case k.pendingDel > 0:
				k.emptied = true // forgotten once its deletes are answered (deleted)
			default:
				o.forget(k)
			}
		case k.idx >= 0:
			// several in flight: the key is in the heap already
			if next.After(k.at) {
				o.schedule(k, maxTime(next, k.tat))
			}
		default:
			o.schedule(k, maxTime(next, k.tat))
		}
		o.mu.Unlock()
		o.poke()
	}
}

// strictStart holds a delivery of k until at least every after the key's previous start
// (delivery.spacing: strict) and records its own start. The pacer already dispatches no
// earlier; this covers the time between dispatch and the sink (a pop, a status write) and
// several deliveries of a key in flight, which reserve their starts in turn.
func (o *orule) strictStart(k *okey, every time.Duration) {
	for {
		now := time.Now()
		o.mu.Lock()
		at := now
		if !k.lastStart.IsZero() {
			at = maxTime(now, k.lastStart.Add(every))
		}
		if !at.After(now) {
			k.lastStart = now // the GCRA grid (tat) was advanced at dispatch
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		time.Sleep(at.Sub(now)) // at most every: then checked again (another may have gone)
	}
}

// steer returns the rule's adaptive limiter and breaker (nil when the rule does not ask for
// them), built once and rebuilt when the rule's options change (a rules reload).
func (o *orule) steer(r *rules.Rule) (*adaptive.Limiter, *breaker.Breaker) {
	o.steerMu.Lock()
	defer o.steerMu.Unlock()
	if !r.Delivery.Adaptive.Enabled {
		o.lim = nil
	} else if c := adaptive.FromRule(r.Delivery.Adaptive); o.lim == nil || c != o.limCfg {
		o.lim, o.limCfg = adaptive.New(c), c
	}
	old := o.brk
	if !r.Sink.Breaker.Enabled {
		o.brk = nil
	} else if c := breaker.FromRule(r.Sink.Breaker); o.brk == nil || c != o.brkCfg {
		o.brk, o.brkCfg = breaker.New(r.Name, c, o.d.brkM), c
		b := o.brk
		b.Notify(func() { o.publishBreaker(b) }) // the admin API shows it (own_steerstate.go)
	}
	if old != nil && old != o.brk {
		go o.clearBreaker() // the new breaker (or none) is closed: its record goes
	}
	return o.lim, o.brk
}

// breakerClosed brings forward the keys that waited for the breaker (put back at its
// probe's timeout while half-open): the sink works again, so they go at their own slots.
func (o *orule) breakerClosed() {
	now := time.Now()
	o.mu.Lock()
	for _, k := range o.keys {
		if k.brkWait && k.idx >= 0 && k.at.After(now) {
			k.brkWait = false
			o.schedule(k, maxTime(k.tat, now))
		}
	}
	o.mu.Unlock()
	o.poke()
}

// steerOutcome tells the rule's limiter and breaker what the sink answered
// (docs/design.md "Steering keys"): 2xx raises the key's outflow back and closes the
// breaker; 429, 503 and timeouts lower the key's outflow; no answer, a timeout or a 5xx
// other than 503 count against the breaker; another 4xx shows the sink works. The verdict
// (retry, dead letter) is decided as without them.
func steerOutcome(lim *adaptive.Limiter, brk *breaker.Breaker, key string, out Outcome, now time.Time) {
	throttle := out.Status == 429 || out.Status == 503 || out.Timeout
	failure := out.Verdict != Delivered && (out.Timeout || (out.Status == 0 && out.Verdict == Retry) || (out.Status >= 500 && out.Status != 503))
	if lim != nil {
		switch {
		case out.Verdict == Delivered:
			lim.OnSuccess(key, now)
		case throttle:
			lim.OnThrottle(key, now, out.RetryAfter)
		}
	}
	if brk != nil {
		switch {
		case failure:
			brk.OnFailure(key, now)
		case out.Verdict == Delivered || (out.Status >= 400 && out.Status < 500 && out.Status != 429):
			brk.OnSuccess(now)
		}
	}
}

// keyPausedRecheck is how often a paused key's override is read again (a change also
// re-times it at once when the index can be subscribed to): obeyed within 1 s.
const keyPausedRecheck = 200 * time.Millisecond

// keyOverride is k's override in force at now, if any (Config.KeyOverrides).
func (o *orule) keyOverride(rule, key string, now time.Time) (overrides.KeyOverride, bool) {
	if o.d.cfg.KeyOverrides == nil {
		return overrides.KeyOverride{}, false
	}
	return o.d.cfg.KeyOverrides.LookupAt(rule, key, now)
}

// keyChanged re-times a known key of the rule whose override changed (key "": every key):
// its next slot counts from its last dispatch at its new interval, so a key raised from 1/min
// to 20/s does not wait out the minute. A key at a worker is re-timed when it returns.
func (o *orule) keyChanged(key string) {
	r := o.rule.Load()
	if r == nil {
		return
	}
	pol := o.d.cfg.Policy(r)
	now := time.Now()
	o.mu.Lock()
	retime := func(k *okey) {
		every := pol.Outflow.Every
		if ko, ok := o.keyOverride(o.name, k.key, now); ok && !ko.Outflow.Zero() {
			every = ko.Outflow.Every()
		}
		if k.every > 0 {
			k.tat = k.tat.Add(every - k.every) // last dispatch + the new interval
			k.every = every
		}
		if k.idx >= 0 {
			o.schedule(k, maxTime(k.tat, now))
		}
	}
	if key == "" {
		for _, k := range o.keys {
			retime(k)
		}
	} else if k := o.keys[key]; k != nil {
		retime(k)
	}
	o.mu.Unlock()
	o.poke()
}

// gridSlack is how late a key's delivery may start and still keep its GCRA grid: timer
// jitter, a wait for a free worker, a slow pop. Within it the next slot stays on the grid, so
// lateness does not lower the key's outflow; anything later counts the next slot from the
// actual start, so no two deliveries of a key start closer than every − every/8. Measured on
// 1,000 keys × 4/s: with a 2 ms slack each late start lost its lateness for good, and the
// engine held only 94 % of the configured rate although the machine had a third to spare.
func gridSlack(every time.Duration) time.Duration { return every / 8 }

// forget drops an emptied key; its due mark (written by the ingress for the claim engine) is
// removed with the next renewal, in one call. Caller holds o.mu.
func (o *orule) forget(k *okey) {
	delete(o.keys, k.key)
	o.steerMu.Lock()
	if o.lim != nil {
		o.lim.Forget(k.key) // an idle key starts again at the configured outflow
	}
	o.steerMu.Unlock()
	if len(o.emptied) < 100_000 {
		o.emptied = append(o.emptied, k.key)
	}
}

// sweep gives up on deliveries that outlived their deadline (sink.timeout + OwnRenew: a sink
// that ignores its context): a new worker takes the stuck one's place, so the rule's other
// keys go on, and the key goes on too — its head, not deleted, is delivered again (as the
// claim engine's next claim of the key would).
// Called from the pacer, at most every 100 ms: one pass over the deliveries in flight, no
// timer per message.
func (o *orule) sweep(r *rules.Rule, now time.Time) {
	limit := sinkTimeout(r) + o.d.cfg.OwnRenew
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Sub(o.swept) < 100*time.Millisecond {
		return
	}
	o.swept = now
	for j := range o.inflight {
		if j.abandoned || now.Sub(j.since) < limit {
			continue
		}
		k := j.k
		j.abandoned = true
		o.busy--
		k.running--
		if k.running == 0 && k.idx < 0 && !k.part.lost && !k.part.releasing {
			k.drained = false
			o.schedule(k, maxTime(k.tat, now))
		}
		o.d.m.lost.WithLabelValues(o.name).Inc()
		o.d.log.Warn("sink ignored the delivery deadline: delivery abandoned, its worker replaced; the key's head is delivered again",
			"rule", o.name, "key", k.key, "deadline", limit)
		o.d.inflight.Add(1)
		go func() { defer o.d.inflight.Done(); o.worker() }()
	}
}

// deliver pops k's head and delivers it. next is when the key may be dispatched again (zero:
// the key was empty); ok false when the partition was lost meanwhile.
func (o *orule) deliver(k *okey) (next time.Time, ok bool) {
	d := o.d
	r := o.rule.Load()
	part := k.part
	multi := maxInFlight(r) > 1
	if multi {
		k.popMu.Lock()
	}
	o.mu.Lock()
	ctx, fence, deadline, lost, after := part.ctx, part.fence, part.deadline, part.lost, k.after
	o.mu.Unlock()
	if lost || !time.Now().Before(deadline) || d.stopping() {
		if multi {
			k.popMu.Unlock()
		}
		return time.Time{}, false
	}
	now := time.Now()
	p, err := d.cfg.Queues.PopAfter(ctx, r.Name, k.key, after)
	if multi {
		// The next delivery of the key takes the message after this one. A message left in
		// the queue (a retry the retry stream refused) is read again once the key has emptied
		// and is learnt afresh.
		if err == nil || errors.Is(err, queue.ErrBadMessage) {
			o.mu.Lock()
			k.after = max(k.after, p.Seq)
			o.mu.Unlock()
		}
		k.popMu.Unlock()
	}
	switch {
	case errors.Is(err, queue.ErrEmpty):
		return time.Time{}, true
	case errors.Is(err, queue.ErrBadMessage):
		d.log.Error("undecodable message at the head of a key: dead-lettering it", "rule", r.Name, "key", k.key, "seq", p.Seq, "err", err)
		return o.afterDead(k, d.dead(ctx, r, p, p.Message, "undecodable message: "+err.Error(), now)), true
	case err != nil:
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		if d.natsLog.allow() {
			d.log.Error("pop failed: key retried later", "rule", r.Name, "key", k.key, "err", err)
		}
		return now.Add(d.cfg.RedisBackoff), true
	}
	m := p.Message
	o.mu.Lock()
	rs := k.retry
	o.mu.Unlock()
	if rs != nil && rs.MsgID == m.ID {
		m.Attempt = max(m.Attempt, rs.Attempts)
		m.LastError = rs.LastError
	}
	limit := maxAttempts(r)
	log := lazyLogger{d: d, rule: r.Name, key: k.key, id: m.ID}
	if m.Expired(o.toRedis(now)) {
		d.m.deliveries.WithLabelValues(r.Name, outcomeExpired).Inc()
		return o.afterDead(k, d.dead(ctx, r, p, m, ReasonExpired, now)), true
	}
	if m.Attempt >= limit {
		return o.afterDead(k, d.dead(ctx, r, p, m, m.LastError, now)), true
	}
	w, wEnd := r.Delivery.Window, time.Time{}
	if ko, ok := o.keyOverride(r.Name, k.key, now); ok && ko.Window != nil {
		// The key's own window (sluice tune --key K --window) replaces the rule's; at the
		// override's end the rule's is judged again (wEnd), not the key's next opening.
		w, wEnd = *ko.Window, ko.Until
	}
	if w.Set {
		// delivery.window: a head outside its window (in its own zone when the window
		// follows the message's) is not delivered and spends nothing; the key waits for the
		// window with its later messages behind it, so order and outflow are kept.
		var zone *time.Location
		if name := m.Headers[window.HeaderTimeZone]; name != "" {
			zone, _ = window.LoadZone(name) // validated at submit; a bad one falls back to the rule's
		}
		loc := w.Location(zone)
		if !w.Open(now, loc) {
			if multi {
				o.mu.Lock()
				if k.after == p.Seq {
					k.after = after // the head is read again when its window opens
				}
				o.mu.Unlock()
			}
			next := w.NextOpen(now, loc)
			if !wEnd.IsZero() && wEnd.Before(next) {
				next = wEnd
			}
			return next, true
		}
	}
	lim, brk := o.steer(r)
	if brk != nil && !brk.Allow(time.Now()) {
		// The breaker refuses: no attempt counted, nothing recorded on the message; the
		// key is back at the breaker's next opening.
		o.mu.Lock()
		if multi && k.after == p.Seq {
			k.after = after
		}
		k.brkWait = true
		o.mu.Unlock()
		return maxTime(brk.Until(), time.Now().Add(10*time.Millisecond)), true
	}
	attempt := m.Attempt + 1
	m.Fence = fence
	var slot string
	if o.ownSlotsNeeded(r) {
		// sink.max_in_flight below the live drainers: the cap is held through Redis slots
		// (sinkslots.go). Taken before the key's next slot is counted, so a wait for the
		// sink does not bring the key's next delivery closer to this one.
		var took bool
		if slot, took = o.takeOwnSinkSlot(ctx, r); !took {
			if multi {
				o.mu.Lock()
				if k.after == p.Seq {
					k.after = after // not delivered: read again
				}
				o.mu.Unlock()
			}
			return time.Time{}, false
		}
	}
	if !multi && k.every > 0 {
		// The key's next slot counts from when this delivery reaches the sink, not from its
		// dispatch: a slow pop followed by a fast one would otherwise bring two deliveries
		// closer than the interval at the sink.
		start := time.Now()
		o.mu.Lock()
		k.tat = maxTime(k.tat, start.Add(k.every-gridSlack(k.every)))
		o.mu.Unlock()
	}
	d.record(ctx, m.ID, StateDelivering, attempt, "")
	if attempt == 1 && !m.CreatedAt.IsZero() {
		d.m.inQueue.WithLabelValues(r.Name).Observe(max(0, now.Sub(m.CreatedAt).Seconds()))
	}
	// The partition's ctx is cancelled when its lease is lost or lapses: the delivery stops
	// before another drainer may own the key. The sink applies sink.timeout itself.
	dctx := telemetry.Context(ctx, m.TraceParent, m.TraceState)
	if r.Delivery.Spacing == rules.SpacingStrict && k.every > 0 {
		o.strictStart(k, k.every)
	}
	var out Outcome
	if telemetry.On() {
		sctx, sp := d.startDelivery(dctx, r, m, attempt, &heldKey{key: k.key, fence: fence})
		out = d.cfg.Sink.Deliver(sctx, r, m)
		endDelivery(sp, out)
	} else {
		out = d.cfg.Sink.Deliver(dctx, r, m)
	}
	if slot != "" {
		o.giveOwnSinkSlot(r, slot) // the sink has answered: the slot is free
	}
	if ctx.Err() == nil {
		d.m.responses.WithLabelValues(r.Name, responseClass(out)).Inc()
		wasClosed := brk == nil || brk.State() == breaker.Closed
		steerOutcome(lim, brk, k.key, out, time.Now())
		if !wasClosed && brk.State() == breaker.Closed {
			o.breakerClosed()
		}
	}
	if ctx.Err() != nil {
		// Lost the partition (or hard stop) during the delivery: only an accepted delivery is
		// acted on (its message deleted), so it is not delivered once more for it.
		if out.Verdict == Delivered {
			o.delivered(context.WithoutCancel(ctx), r, k, p.Seq, m.ID, attempt, log)
		}
		return time.Time{}, false
	}
	m.Attempt = attempt
	switch out.Verdict {
	case Delivered:
		o.delivered(ctx, r, k, p.Seq, m.ID, attempt, log)
		if rs != nil {
			o.setRetry(k, nil)
		}
		if d.log.Enabled(ctx, slog.LevelDebug) {
			log.get().Debug("delivered", "attempt", attempt, "fence", fence)
		}
		return time.Now(), true
	case Dead:
		m.LastError = out.Err
		return o.afterDead(k, d.dead(ctx, r, p, m, out.Err, now)), true
	}
	m.LastError = out.Err
	if attempt >= limit {
		return o.afterDead(k, d.dead(ctx, r, p, m, fmt.Sprintf("%d attempts, last error: %s", attempt, out.Err), now)), true
	}
	delay := out.RetryAfter
	if delay <= 0 {
		delay = backoff.Delivery(r, attempt, nil)
	}
	at := time.Now().Add(delay)
	d.m.deliveries.WithLabelValues(r.Name, Retry.String()).Inc()
	d.record(ctx, m.ID, StateRetrying, attempt, out.Err)
	log.get().Info("delivery failed: retrying", "attempt", attempt, "status", out.Status, "err", out.Err, "retry_in", delay)
	if r.Ordering == rules.OrderingRelaxed && d.cfg.Retrier != nil {
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		err := d.cfg.Retrier.ScheduleRetry(pctx, r, m, o.toRedis(at))
		pcancel()
		if err == nil {
			d.deleteAfter(ctx, r, p.Seq, log)
			if rs != nil {
				o.setRetry(k, nil)
			}
			return time.Now(), true
		}
		log.get().Warn("retry stream refused the message: retrying in place", "err", err)
	}
	o.setRetry(k, &queue.RetryState{MsgID: m.ID, Attempts: attempt, LastError: out.Err})
	return at, true
}

// delivered is Drainer.delivered with the delete sent without waiting for its answer: the
// key's next pop starts after seq. A failed delete makes the key start from its head again
// (the message is delivered once more: at-least-once).
func (o *orule) delivered(ctx context.Context, r *rules.Rule, k *okey, seq uint64, id string, attempt int, log lazyLogger) {
	d := o.d
	d.record(ctx, id, StateDelivered, attempt, "")
	o.mu.Lock()
	k.after = max(k.after, seq)
	k.pendingDel++
	o.mu.Unlock()
	err := d.cfg.Queues.DeleteAsync(r.Name, seq, func(err error) { o.deleted(k, seq, err, log) })
	if err != nil {
		d.deleteAfter(ctx, r, seq, log)
		o.deleted(k, seq, nil, log)
	}
	d.observeFinal(r, Delivered.String(), attempt)
	d.m.deliveries.WithLabelValues(r.Name, Delivered.String()).Inc()
}

// deleted is the answer to an async delete (NATS's handler goroutine: must not block long).
func (o *orule) deleted(k *okey, seq uint64, err error, log lazyLogger) {
	if err != nil && !errors.Is(err, queue.ErrGone) {
		log.get().Error("delete failed: the message will be delivered again", "seq", seq, "err", err)
	}
	o.mu.Lock()
	k.pendingDel--
	if err != nil && !errors.Is(err, queue.ErrGone) {
		k.after = 0 // read the key from its head again: the message is still there
		if k.emptied && k.running == 0 && k.idx < 0 && o.keys[k.key] == k && !k.part.lost {
			k.emptied = false
			o.schedule(k, maxTime(k.tat, time.Now()))
		}
	} else if k.emptied && k.pendingDel == 0 && k.running == 0 && k.idx < 0 && o.keys[k.key] == k {
		o.forget(k)
	}
	o.mu.Unlock()
	if err != nil {
		o.poke()
	}
}

// afterDead maps d.dead's answer: the key goes on at once, or (dead letters refused) its
// head is offered to them again at rel.At.
func (o *orule) afterDead(k *okey, rel queue.Release) time.Time {
	if rel.Mode == queue.Retrying {
		st := rel.State
		o.setRetry(k, &st)
		return rel.At
	}
	o.mu.Lock()
	had := k.retry != nil
	o.mu.Unlock()
	if had {
		o.setRetry(k, nil)
	}
	return time.Now()
}

// setRetry records the head's retry state in memory and in Redis (a new owner reads it on
// acquisition): Redis is written only on failures and on the success that follows one.
func (o *orule) setRetry(k *okey, st *queue.RetryState) {
	o.mu.Lock()
	k.retry = st
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.d.runCtx), postTimeout)
	defer cancel()
	if err := o.d.cfg.Scheduler.Ownership.SetOwnRetry(ctx, o.name, k.key, st); err != nil && o.d.redisLog.allow() {
		o.d.log.Warn("retry state not stored: a new owner would count the head's attempts from 0", "rule", o.name, "key", k.key, "err", err)
	}
}

func (o *orule) toRedis(t time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return t.Add(o.offset)
}
