package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// AdmitPipeline is the Redis side of admission: the admitter (internal/admit) asks it for
// counts, marks and idempotency takes, and it sends those of many concurrent admissions in
// one pipelined round trip. The Scheduler's pipe steps it uses (pipe.go) are unexported: it
// is the only way in. Under the drainers' own engine only its idempotency takes are used.
//
// An admission needs Redis twice: before its publish is acknowledged, to count the message
// into the key's depth (Count — the answer's depth and eta come back from it), and after, to
// mark the key due (Mark). An admission with an idempotency key first takes the key
// (Take, or with its count in a batch submission's CountBatch): a SET NX among a batch's
// commands costs Redis ~1 µs, where a round trip of its own cost as much as the rest of the
// admission. Count is sent at the same time as the publish, and Mark is not waited for, so an admission costs the latency of the slower
// of its two servers instead of their sum; without batching every admission would also pay
// its own round trip and syscalls on both ends, which was most of its CPU.
//
// One goroutine collects whatever is waiting (up to MaxBatch), sends one pipeline, waits for
// it and answers the waiters. In a pipeline, undos come first, then each rule's marks and
// counts as one admit.lua call per partition, marks before counts (a script call costs
// several times the commands it runs; counts of stored messages, CountBatch with Stored,
// are counted and marked in that same call, after every count); pipelines never overlap. That order keeps every
// cause before its effect: a mark or an undo is only asked for after its own count was
// answered, in an earlier pipeline, so a sequential client's second Count sees its first
// Mark.
type AdmitPipeline struct {
	RDB       redis.UniversalClient
	Scheduler *Scheduler
	// IdempotencyTTL is how long an idempotency key maps to its first message. Default 24h.
	IdempotencyTTL time.Duration
	// MaxBatch bounds one pipeline. Default 512, at most 4096.
	MaxBatch int
	// Timeout bounds one pipeline's round trip. Default 1s.
	Timeout time.Duration

	once sync.Once
	ch   chan *op
	// downUntil (unix ns): after a pipeline failed to reach Redis, admissions skip Redis
	// until then instead of each waiting for a timeout; one pipeline a second probes.
	downUntil atomic.Int64

	// scratch of the run goroutine
	groups   map[string]*group
	deferred []*op // undos held while Redis is down
	order    []string
	results  []Admitted
	takes    []takeCmd
}

type takeCmd struct {
	op  *op
	cmd *IdempotencyTake
}

func (b *AdmitPipeline) ttl() time.Duration {
	if b.IdempotencyTTL > 0 {
		return b.IdempotencyTTL
	}
	return DefaultIdempotencyTTL
}

// DefaultIdempotencyTTL is how long an idempotency key is kept by default.
const DefaultIdempotencyTTL = 24 * time.Hour

// ErrRedisDown is the result of a Count while Redis is known to be unreachable.
var ErrRedisDown = errors.New("queue: Redis unreachable")

func (b *AdmitPipeline) down() bool { return time.Now().UnixNano() < b.downUntil.Load() }

// Down reports whether Redis was found unreachable within the last second: callers skip
// optional Redis work (idempotency keys) instead of waiting for a timeout.
func (b *AdmitPipeline) Down() bool { return b.down() }

type opKind uint8

const (
	opCount opKind = iota // count into depth; waited for
	opMark                // mark due; not waited for
	opUndo                // count out; not waited for
)

// op is one admission's request to the batch. Ops are recycled (opPool): a Count's by its
// Wait, the others by the batch goroutine once sent — every admission makes two of them.
type op struct {
	kind      opKind
	rule, key string
	capacity  int64
	now       time.Time
	idemKey   string // opCount: an idempotency key to take for id, or ""
	id        string
	stored    bool // opCount: the message is stored; its count also marks its key due
	takeOnly  bool // opCount: only the take of idemKey, no count (TakeBatch)

	// results of opCount
	answered bool // its count script answered
	res      Admitted
	owner    string // the id that owns idemKey (id itself when this count took it)
	takeErr  error  // the take's own error
	err      error
	done     chan struct{} // buffered (1): receives one value when the result is in
	// group, when set, is answered instead of done: the counts of one CountBatch.
	group *countGroup
}

// countGroup is the counts of one CountBatch: the last one answered wakes its caller.
type countGroup struct {
	left atomic.Int32
	done chan struct{}
}

// answer hands a count's result to its waiter: its Wait, or its CountBatch once the whole
// group is answered. o belongs to the waiter from here on.
func (o *op) answer() {
	if g := o.group; g != nil {
		if g.left.Add(-1) == 0 {
			g.done <- struct{}{}
		}
		return
	}
	o.done <- struct{}{}
}

const maxPipeline = 4096

// maxDeferred bounds the undos kept while Redis is down; beyond it they are dropped (a count
// heals when its key empties, the stream refuses a message as full, or the reconciler runs).
const maxDeferred = 4096

var opPool = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

func newOp(kind opKind, rule, key string) *op {
	o := opPool.Get().(*op)
	done := o.done
	*o = op{kind: kind, rule: rule, key: key, done: done}
	return o
}

// Pending is a Count in flight; Wait returns its result.
type Pending struct{ op *op }

// Wait returns the key's depth (counting this message) and next slot. The batch always
// answers within the AdmitPipeline's Timeout. Call it (or Result) exactly once.
func (p Pending) Wait() (depth int64, next time.Time, err error) {
	r, err := p.Result()
	return r.Depth, r.Next, err
}

// Result is Wait with everything the count answered (see Admitted).
func (p Pending) Result() (Admitted, error) {
	o := p.op
	<-o.done
	res, err := o.res, o.err
	*o = op{done: o.done} // drop references before recycling
	opPool.Put(o)
	return res, err
}

func (b *AdmitPipeline) start() {
	b.once.Do(func() {
		if b.MaxBatch <= 0 {
			b.MaxBatch = 512
		}
		// A rule's counts are one script call whose keys Lua unpacks onto its stack, which
		// holds under 8,000 values.
		b.MaxBatch = min(b.MaxBatch, maxPipeline)
		if b.Timeout <= 0 {
			b.Timeout = time.Second
		}
		b.ch = make(chan *op, 8*b.MaxBatch)
		go b.run()
	})
}

// Count counts a message about to be published into (rule, key)'s depth. It returns at
// once; Wait for the result.
func (b *AdmitPipeline) Count(rule, key string, capacity int64, now time.Time) Pending {
	b.start()
	o := newOp(opCount, rule, key)
	o.capacity, o.now = capacity, now
	return b.send(o)
}

func (b *AdmitPipeline) send(o *op) Pending {
	if b.down() {
		o.err = ErrRedisDown
		o.answer()
		return Pending{o}
	}
	b.ch <- o
	return Pending{o}
}

// CountRequest is one count of CountBatch: Count's arguments, with an idempotency key's
// take when IdempotencyKey is set.
type CountRequest struct {
	Rule, Key string
	Capacity  int64
	Now       time.Time
	// IdempotencyKey, when set, is taken for Value, in the count's pipeline (see Take).
	IdempotencyKey, Value string
	// Stored: the message's publish was acknowledged already; its count also makes its key
	// due, in the same script call (admission.Stored), instead of a Mark of its own.
	Stored bool
}

// CountResult is the answer to one count of CountBatch: what Pending.Taken returns (Owner
// and TakeErr only for a take).
type CountResult struct {
	Admitted Admitted
	Owner    string
	Err      error // the count's
	TakeErr  error // the take's own
}

// CountBatch is Count (with takes) of many messages at once, for a batch submission:
// they go to the batch goroutine together, usually into one pipeline, and the caller is
// woken once, when the last is answered, instead of once per count. out[i] answers reqs[i].
func (b *AdmitPipeline) CountBatch(reqs []CountRequest, out []CountResult) {
	b.countBatch(reqs, out, false)
}

// TakeBatch is the idempotency takes of CountBatch without the counts, for messages
// counted once their publishes are answered (CountBatch with Stored): Owner and TakeErr
// of out[i] answer reqs[i] (every one has an IdempotencyKey).
func (b *AdmitPipeline) TakeBatch(reqs []CountRequest, out []CountResult) {
	b.countBatch(reqs, out, true)
}

func (b *AdmitPipeline) countBatch(reqs []CountRequest, out []CountResult, takeOnly bool) {
	if len(reqs) == 0 {
		return
	}
	b.start()
	g := &countGroup{done: make(chan struct{}, 1)}
	g.left.Store(int32(len(reqs)))
	ops := make([]*op, len(reqs))
	for i, r := range reqs {
		o := newOp(opCount, r.Rule, r.Key)
		o.capacity, o.now, o.idemKey, o.id, o.group = r.Capacity, r.Now, r.IdempotencyKey, r.Value, g
		o.stored, o.takeOnly = r.Stored, takeOnly
		ops[i] = o
		b.send(o)
	}
	<-g.done
	for i, o := range ops {
		out[i] = CountResult{Admitted: o.res, Owner: o.owner, Err: o.err, TakeErr: o.takeErr}
		if o.idemKey != "" && out[i].TakeErr == nil && out[i].Owner == "" {
			out[i].TakeErr = o.err // the pipeline did not run
		}
		*o = op{done: o.done}
		opPool.Put(o)
	}
}

// Take takes idempotency key k of rule for id (a message id, or IdempotencyValue)
// for IdempotencyTTL, batched with other admissions' takes, and returns the value that owns
// the key (id itself when this take took it) or the take's error.
func (b *AdmitPipeline) Take(rule, k, id string) (owner string, err error) {
	b.start()
	o := newOp(opCount, rule, "")
	o.idemKey, o.id, o.takeOnly = k, id, true
	_, owner, _, takeErr := b.send(o).Taken()
	return owner, takeErr
}

// TakeNow takes idempotency key k of rule for id in a round trip of its own, for an
// admission that counts nothing now (a scheduled message); see Take.
func (b *AdmitPipeline) TakeNow(ctx context.Context, rule, k, id string) (owner string, err error) {
	return b.Scheduler.Idempotency.Take(ctx, rule, k, id, b.ttl())
}

// Taken returns the result of a count that carries an idempotency take (Take): the count as
// Result does (nothing for a take alone), the value that owns the idempotency key (the
// take's own when it took it) and the take's error (the count
// may have succeeded without it). Call it (or Wait, Result) exactly once.
func (p Pending) Taken() (res Admitted, owner string, countErr, takeErr error) {
	o := p.op
	<-o.done
	res, owner, countErr, takeErr = o.res, o.owner, o.err, o.takeErr
	if takeErr == nil && owner == "" {
		takeErr = countErr // the pipeline did not run
	}
	*o = op{done: o.done}
	opPool.Put(o)
	return res, owner, countErr, takeErr
}

// Mark makes (rule, key) due; call it once the publish is acknowledged. It does not wait:
// a mark lost to a crash or a Redis outage is repaired by the drainers' reconciler.
func (b *AdmitPipeline) Mark(rule, key string, now time.Time) {
	b.start()
	if b.down() {
		return
	}
	o := newOp(opMark, rule, key)
	o.now = now
	b.ch <- o
}

// Undo counts out a message counted by Count whose publish failed or was a duplicate. It
// does not wait. Unlike Count and Mark it is queued while Redis is down too, and sent once
// Redis answers again (up to maxDeferred of them).
func (b *AdmitPipeline) Undo(rule, key string) {
	b.start()
	b.ch <- newOp(opUndo, rule, key)
}

func (b *AdmitPipeline) run() {
	batch := make([]*op, 0, b.MaxBatch)
	for o := range b.ch {
		batch = append(batch[:0], o)
	collect:
		for len(batch) < b.MaxBatch {
			select {
			case o := <-b.ch:
				batch = append(batch, o)
			default:
				break collect
			}
		}
		var err error
		if b.down() {
			// Redis was found unreachable while this batch waited behind the failed one:
			// answer at once instead of each queued batch waiting out its own Timeout.
			// Undos wait for Redis to come back.
			err = ErrRedisDown
			for i, o := range batch {
				if o.kind == opUndo && len(b.deferred) < maxDeferred {
					b.deferred = append(b.deferred, o)
					batch[i] = nil
				}
			}
		} else {
			if len(b.deferred) > 0 {
				batch = append(b.deferred, batch...) // undos first: their counts were earlier
				b.deferred = nil
			}
			err = b.flush(batch)
		}
		for i, o := range batch {
			batch[i] = nil
			if o == nil {
				continue
			}
			if o.kind != opCount {
				*o = op{done: o.done}
				opPool.Put(o)
				continue
			}
			if !o.answered && o.err == nil {
				o.err = err // its own command got no answer (another rule's error does not count)
			}
			o.answer()
		}
	}
}

func (b *AdmitPipeline) flush(batch []*op) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	err := b.exec(ctx, batch, false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A fresh or restarted Redis has no scripts cached: load them and send the script
		// calls once more (the plain commands already ran; an undo must not run twice).
		for _, s := range Scripts() {
			s.Load(ctx, b.RDB)
		}
		for _, o := range batch {
			o.err = nil // an answered count keeps its answer: exec does not send it again
		}
		err = b.exec(ctx, batch, true)
	}
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		b.downUntil.Store(time.Now().Add(time.Second).UnixNano()) // unreachable, not a command error
	}
	return err
}

// group is the admissions of one rule in a batch: its marks and its counts each go to
// Redis as one script call (a script's fixed cost is several times that of the commands it
// runs).
type group struct {
	marks   []string
	markNow time.Time
	counts  []admission
	countOp []*op
	cmd     *admitCounts
}

// exec sends one batch. Marks and undos go first, counts last: a mark or an undo is only
// ever asked for after its own count was answered (an earlier batch), and a count in this
// batch may come from a client that saw the answer of a mark's admission, so this order
// keeps every cause before its effect.
func (b *AdmitPipeline) exec(ctx context.Context, batch []*op, scriptsOnly bool) error {
	if b.groups == nil {
		b.groups = map[string]*group{}
	}
	for _, g := range b.groups {
		g.marks, g.counts, g.countOp, g.cmd, g.markNow = g.marks[:0], g.counts[:0], g.countOp[:0], nil, time.Time{}
	}
	b.order = b.order[:0]
	groupOf := func(rule string) *group {
		g := b.groups[rule]
		if g == nil {
			g = &group{}
			b.groups[rule] = g
		}
		if len(g.marks) == 0 && len(g.counts) == 0 {
			b.order = append(b.order, rule)
		}
		return g
	}
	pipe := b.RDB.Pipeline()
	for _, o := range batch {
		switch o.kind {
		case opMark:
			g := groupOf(o.rule)
			g.marks = append(g.marks, o.key)
			if o.now.After(g.markNow) {
				g.markNow = o.now
			}
		case opUndo:
			if scriptsOnly {
				continue
			}
			b.Scheduler.uncountPipe(ctx, pipe, o.rule, o.key)
		case opCount:
			if o.idemKey != "" && !scriptsOnly {
				b.takes = append(b.takes, takeCmd{o, b.Scheduler.takeIdempotencyKeyPipe(ctx, pipe, o.rule, o.idemKey, o.id, b.ttl())})
			}
			if o.answered || o.takeOnly { // scriptsOnly: its count ran, only another script failed
				continue
			}
			g := groupOf(o.rule)
			g.counts = append(g.counts, admission{Key: o.key, Capacity: o.capacity, Now: o.now, Stored: o.stored})
			g.countOp = append(g.countOp, o)
		}
	}
	for _, rule := range b.order {
		// A rule's marks, then its counts: one script call (admit.lua) per partition.
		g := b.groups[rule]
		g.cmd = b.Scheduler.markCountPipe(ctx, pipe, rule, g.marks, g.markNow, g.counts)
	}
	// The batch's error is its first real one: a take that found its key free answers
	// redis.Nil, which is not an error, and must not hide a NOSCRIPT behind it.
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		err = nil
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				err = e
				break
			}
		}
	}
	for i, c := range b.takes {
		switch owner, cerr := c.cmd.Result(); {
		case errors.Is(cerr, redis.Nil):
			c.op.owner = c.op.id // the key was free: this take took it
		case cerr == nil:
			c.op.owner = owner
		default:
			c.op.takeErr = cerr
		}
		b.takes[i] = takeCmd{}
	}
	b.takes = b.takes[:0]
	for _, rule := range b.order {
		g := b.groups[rule]
		if g.cmd == nil {
			continue
		}
		var rerr error
		b.results, rerr = admittedResults(g.cmd, len(g.counts), b.results)
		ran := g.cmd.Err() == nil // the script ran (even if its answer did not parse): never resend it
		for i, o := range g.countOp {
			o.answered = ran
			if o.err = rerr; rerr == nil {
				o.res = b.results[i]
			}
		}
	}
	if len(b.groups) > 1024 { // rules come and go with reloads: do not keep every one ever seen
		clear(b.groups)
	}
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}
