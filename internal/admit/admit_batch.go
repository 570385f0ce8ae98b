package admit

import (
	"context"
	"sync"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
)

// BatchAdmission is one message of AdmitBatch: Admit's arguments and its answer.
type BatchAdmission struct {
	Rule    *rules.Rule
	Msg     queue.Message
	Options Options

	Result Result
	Err    error
}

// batchState is one message's admission between the steps of AdmitBatch.
type batchState struct {
	ad      admission
	live    bool // still to count and publish
	count   queue.CountResult
	claimed bool // its count took its idempotency key
	pub     int  // its index in the batch's publications
}

var (
	statePool    SlicePool[batchState]
	pubPool      SlicePool[queue.Publication]
	countReqPool SlicePool[queue.CountRequest]
	countResPool SlicePool[queue.CountResult]
)

// keyConcurrency bounds the keys of one batch whose steps with round trips of their own
// (admission limits, refusals) run at once.
const keyConcurrency = 64

// AdmitBatch is Admit of many messages at once (a batch submission): each gets the answer
// Admit would give it, and the messages of one key enter its queue in the order given. The
// steps are taken for the whole batch together instead of once per message: the
// idempotency keys taken together (TakeBatch; only when items carry one), every message
// published asynchronously on the one NATS connection and every PubAck waited for
// (EnqueueBatch), then every message counted and the stored ones' keys made due in one
// script call (CountBatch with Stored, admit.lua); no message is answered Queued
// before its PubAck. Admit counts while it publishes and marks after; a batch counts after
// its publishes, as Admit's count may land too, and marks with the count, so the count's
// answer (depth, next slot, held) is the same kind of snapshot and the mark comes after
// the PubAck as before, for one Redis round trip and one script call per batch instead of
// two (and a Mark per message). Capacity needs no count first: JetStream enforces it
// (DiscardNewPerSubject). Admission limits and refusals (park, a full key's depth heal)
// keep their round trips per message, keys concurrently.
func (a *Admitter) AdmitBatch(ctx context.Context, items []BatchAdmission) {
	st := statePool.Get(len(items))
	defer statePool.Put(st)
	var limited []int
	for i := range items {
		it := &items[i]
		ad, err := a.prepare(it.Rule, it.Msg, it.Options)
		if err != nil {
			it.Err = err
			continue
		}
		st[i].ad, st[i].live = ad, true
		if a.limited(it.Rule) {
			limited = append(limited, i)
		}
	}

	// 1. Admission limits: one decision per message, the messages of a key in order.
	a.eachKey(items, limited, func(i int) {
		if res, done, err := a.limit(ctx, &st[i].ad); done {
			items[i].Result, items[i].Err, st[i].live = res, err, false
		}
	})

	// 2. Claim the idempotency keys of the messages still in, together: a claimed key must
	// be known before its message is published.
	var cidx []int
	var creqs []queue.CountRequest
	for i := range st {
		if ad := &st[i].ad; st[i].live && ad.o.IdempotencyKey != "" {
			cidx = append(cidx, i)
			creqs = append(creqs, queue.CountRequest{Rule: ad.r.Name, Key: ad.m.Key, IdempotencyKey: ad.o.IdempotencyKey,
				Value: queue.IdempotencyValue(ad.m.ID, ad.o.RequestDigest)})
		}
	}
	if len(creqs) > 0 {
		claims := make([]queue.CountResult, len(creqs))
		a.Redis.TakeBatch(creqs, claims)
		for j, i := range cidx {
			s, c := &st[i], &claims[j]
			switch {
			case c.TakeErr != nil:
				a.throttledWarn("idempotency", "admit: idempotency key not checked (Redis unreachable)", "rule", s.ad.r.Name, "err", c.TakeErr)
			case c.Owner != creqs[j].Value:
				items[i].Result, s.live = a.taken(&s.ad, c.Owner), false
			default:
				s.claimed = true
			}
		}
	}

	// 3. Publish, in order, every message still in.
	idx := make([]int, 0, len(items))
	pubs := pubPool.Get(len(items))[:0]
	defer func() { pubPool.Put(pubs) }()
	for i := range st {
		if s := &st[i]; s.live {
			s.pub = len(pubs)
			idx, pubs = append(idx, i), append(pubs, queue.Publication{Rule: s.ad.r.Name, Msg: s.ad.m, MsgID: s.ad.o.MsgID, New: a.lean(&s.ad)})
		}
	}
	if telemetry.On() {
		a.tracedEnqueueBatch(ctx, pubs)
	} else {
		a.Queues.EnqueueBatch(ctx, pubs)
	}

	// 4. Count every published message, together, once its publish is answered, and make
	// the keys of the stored ones due in the same script call (admit.lua): what
	// Admit's count and mark do, in one Redis round trip for the batch instead of a count
	// before the publishes and marks after. The count is then read after the message is
	// stored instead of while it is published: Admit's count, sent with its publish, may
	// land on either side of it too.
	// Only for the claim engine (DueMarks): the own engine's drainers learn of the messages
	// from their publishes.
	if a.DueMarks {
		reqs := countReqPool.Get(len(idx))
		defer countReqPool.Put(reqs)
		for j, i := range idx {
			ad := &st[i].ad
			reqs[j] = queue.CountRequest{Rule: ad.r.Name, Key: ad.m.Key, Capacity: ad.capacity, Now: ad.now, Stored: pubs[j].Err == nil}
		}
		counts := countResPool.Get(len(reqs))
		defer countResPool.Put(counts)
		a.Redis.CountBatch(reqs, counts)
		for j, i := range idx {
			s := &st[i]
			s.count.Admitted, s.count.Err = counts[j].Admitted, counts[j].Err
			s.ad.marked = reqs[j].Stored && s.count.Err == nil
		}
	}

	if !a.DueMarks {
		a.batchDepths(ctx, items, st, pubs)
	}

	// 5. Answer each. A stored message with its count needs no round trip to be answered;
	// a refused or failed one may (a park, a depth heal, the stream's depth while Redis is
	// down): those run per key, keys concurrently.
	var slow []int
	settle := func(i int) {
		s := &st[i]
		p := &pubs[s.pub]
		items[i].Result, items[i].Err = a.settle(ctx, &s.ad, s.count.Admitted, s.count.Err, s.claimed, p.Enqueued, p.Err)
	}
	for i := range st {
		switch s := &st[i]; {
		case !s.live:
		case pubs[s.pub].Err != nil || s.count.Err != nil || (!a.DueMarks && s.ad.o.Depth && s.ad.depth == 0):
			slow = append(slow, i) // a depth asked for and not read with its key's: a request of its own
		default:
			settle(i)
		}
	}
	a.eachKey(items, slow, settle)
}

// batchDepths reads, for the stored messages whose depth was asked for (Options.Depth) under
// the own engine, their keys' depths from the stream: one request per key, keys
// concurrently, once every publish is answered. A message's depth is what its key held
// right after it was stored, as a single admission would answer: the key's depth less the
// messages of the batch stored after it.
func (a *Admitter) batchDepths(ctx context.Context, items []BatchAdmission, st []batchState, pubs []queue.Publication) {
	last := map[string]int{} // each key's last stored item, whose depth is read
	for i := range st {
		if s := &st[i]; s.live && s.ad.o.Depth && pubs[s.pub].Err == nil {
			last[s.ad.r.Name+"\x00"+s.ad.m.Key] = i
		}
	}
	if len(last) == 0 {
		return
	}
	asked := make([]int, 0, len(last))
	for _, i := range last {
		asked = append(asked, i)
	}
	depths := make([]int64, len(st))
	a.eachKey(items, asked, func(i int) {
		ad := &st[i].ad
		if d, err := a.Queues.Depth(ctx, ad.r.Name, ad.m.Key); err == nil {
			depths[i] = int64(d)
		}
	})
	// From each key's last item back to its first: every message stored after one is one
	// fewer in front of it.
	after := map[string]int64{}
	for i := len(st) - 1; i >= 0; i-- {
		s := &st[i]
		if !s.live || !s.ad.o.Depth || pubs[s.pub].Err != nil {
			continue
		}
		k := s.ad.r.Name + "\x00" + s.ad.m.Key
		d := depths[last[k]]
		if d == 0 {
			continue // not read: stored reads it alone
		}
		s.ad.depth = max(1, d-after[k])
		if !pubs[s.pub].Enqueued.Duplicate {
			after[k]++
		}
	}
}

// eachKey runs f on the items at idx: those of one key one after the other in their order,
// different keys concurrently (at most keyConcurrency at once). It returns when every f
// has returned.
func (a *Admitter) eachKey(items []BatchAdmission, idx []int, f func(i int)) {
	if len(idx) == 0 {
		return
	}
	groups := map[string][]int{}
	var order []string
	for _, i := range idx {
		k := items[i].Rule.Name + "\x00" + items[i].Msg.Key
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	run := func(k string) {
		for _, i := range groups[k] {
			f(i)
		}
	}
	if len(order) == 1 {
		run(order[0])
		return
	}
	sem := make(chan struct{}, keyConcurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run(k)
		})
	}
	wg.Wait()
}
