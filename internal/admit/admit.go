// Package admit is sluice's admission: the one path by which a message enters a key's
// queue, used by the ingress for new requests, by the re-admitter for parked messages and
// by dead-letter replay.
//
// Admission of a message m under a queue rule R, key k:
//
//  1. R's admission limits (bucket/), if any, are decided for k. Denied → park or reject.
//  2. m is published to k's subject in R's stream with its id as Nats-Msg-Id. JetStream
//     itself refuses the (capacity+1)-th message of k (error 10077) → m is parked or
//     rejected.
//  3. Only when the drainers run the claim engine (Admitter.DueMarks): m is also counted into
//     k's depth in Redis (batched, see queue.AdmitPipeline) while it is published, and once the publish
//     is acknowledged k is marked due (not waited for); the answer's depth and eta come from
//     the count. The own engine learns of m from the publish itself (its drainers subscribe
//     to the rule's subjects), so admission writes nothing to Redis: a rule without
//     admission limits and a message without an idempotency key cost one JetStream publish
//     and nothing else. The answer then has no depth or eta unless Options.Depth asks for
//     them (one stream request after the publish).
//
// Redis being down never stops the publish: limits fall back to a local limiter (bucket.Degraded)
// and a missed due mark is repaired by the drainers' reconciler. NATS being down makes
// admission fail with ErrUnavailable: nothing is acknowledged that was not stored.
package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-io/sluice/bucket"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// ErrUnavailable means the message could not be stored durably (NATS unreachable, stream
// leader election, retry stream full). The caller answers 503 with Retry-After.
var ErrUnavailable = errors.New("admit: cannot store the message now")

// ErrStoreFull means the queue store (the JetStream server's max_store) has no room: the
// server refused at once. The caller answers 503 with the cause; it clears as messages are
// delivered, or when the store is given room.
var ErrStoreFull = errors.New("admit: the queue store is out of space")

// Decision is what happened to a message.
type Decision string

const (
	Queued   Decision = "queued"
	Parked   Decision = "parked"
	Rejected Decision = "rejected"
	// KeyTaken: the idempotency key belongs to another message (Result.Owner); nothing was
	// stored.
	KeyTaken Decision = "key-taken"
	// KeyReused: the idempotency key belongs to another message (Result.Owner) made from
	// another request (Options.RequestDigest differs): a key reused for other work, not a
	// retry. Nothing was stored.
	KeyReused Decision = "key-reused"
)

// Why a message was not queued.
const (
	ReasonQueueFull = "queue-full"
	ReasonLimit     = "rate-limit"
	// ReasonRuleFull: the rule's whole queue holds its max_bytes (one rule's flood).
	ReasonRuleFull = "rule-full"
)

// Result is the outcome of one admission, with everything the response headers need.
type Result struct {
	Decision  Decision
	Duplicate bool // the stream already had this message id (nothing new stored)
	// Owner is the message that owns the idempotency key (KeyTaken).
	Owner string
	// Claimed: this admission took its idempotency key (release it if the message is refused).
	Claimed bool
	Reason  string // for Parked/Rejected: ReasonQueueFull or ReasonLimit

	// Queue state after the admission (queue rules).
	Depth    int64
	Capacity int64
	ETA      time.Time // estimated dispatch time of the message (Queued)

	RetryAt time.Time // Parked: when the re-admitter tries again (rounded up to the second)

	// Headers: the policy that decided, and its numbers.
	Policy     string
	Limit      int64
	Remaining  int64
	Reset      time.Duration // until one more place frees up / the window resets
	Window     time.Duration // the policy's window (RateLimit-Policy w=)
	RetryAfter time.Duration // Rejected: until a retry could succeed
	Violated   []string      // Rejected: violated policies
}

// Outflow returns the outflow currently in force for a rule (rules file or live override).
type Outflow func(r *rules.Rule) (outflow, total rules.Rate)

// Admitter admits messages. Safe for concurrent use. All fields but Limits, Parking,
// Logger, Now and OutflowOf are required.
type Admitter struct {
	Queues    *queue.Queues
	Scheduler *queue.Scheduler
	Redis     *queue.AdmitPipeline // depth counts, due marks and idempotency keys, batched
	// DueMarks: the drainers run the claim engine, which learns of work from due marks and
	// answers from depth counts in Redis: every admission counts its key's depth and marks
	// it due. false (the own engine, whose drainers learn of a message from its publish):
	// admission writes neither, and reads depth from the stream only when asked.
	DueMarks bool
	// Takes, when set, takes the idempotency keys of single admissions in pipelines of its
	// own, which carry nothing else: a take is waited for before its publish, and a
	// pipeline of takes alone comes back sooner than one with the counts' scripts. nil:
	// Redis takes them.
	Takes     *queue.AdmitPipeline
	Limits    bucket.Store // nil: admission limits are not enforced (no rule has one)
	Parking   *retry.Store // nil: overflow park is refused as unavailable
	OutflowOf Outflow      // nil: the rule's own outflow
	// CapacityOf returns the capacity in force (a live override); nil: the rule's own.
	CapacityOf func(r *rules.Rule) int64
	Logger     *slog.Logger
	Now        func() time.Time

	logMu   sync.Mutex
	lastLog map[string]time.Time
}

func (a *Admitter) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Admitter) outflow(r *rules.Rule) (rules.Rate, rules.Rate) {
	if a.OutflowOf != nil {
		return a.OutflowOf(r)
	}
	return r.Queue.Outflow, r.Queue.TotalOutflow
}

// LimitKey is the bucket key of (rule, key) in the limiter: rule names are
// [A-Za-z0-9_-], so the first ':' splits the two unambiguously.
func LimitKey(rule, key string) string { return rule + ":" + key }

// Limits converts a rule's admission limits for the limiter.
func Limits(r *rules.Rule) []bucket.Limit {
	out := make([]bucket.Limit, 0, len(r.RateLimits))
	for _, l := range r.RateLimits {
		name := l.Name
		if name == "" {
			name = r.Name
		}
		out = append(out, bucket.Limit{
			Algorithm: bucket.Algorithm(l.Algorithm),
			Rate:      l.Rate.Requests,
			Interval:  l.Rate.Interval,
			Burst:     l.Burst,
			Name:      name,
			Shadow:    r.ShadowMode,
			Location:  l.TimeZone, // windows turn at that zone's midnight (or hour)
		})
	}
	return out
}

// Options of one admission.
type Options struct {
	MsgID string // Nats-Msg-Id; "" = m.ID
	// IdempotencyKey, when set, is claimed for m.ID with the admission's count, before the
	// publish: a key that belongs to another message answers KeyTaken and stores nothing.
	// While Redis is unreachable it is not checked (logged).
	IdempotencyKey string
	// RequestDigest, when set, is stored with the idempotency key's claim: a key owned by a
	// message whose claim has another digest answers KeyReused instead of KeyTaken. The
	// claim's value is then queue.IdempotencyValue(m.ID, RequestDigest), which is what a
	// release must name.
	RequestDigest string
	// Park lets a refusal be parked when the rule says overflow: park. The re-admitter
	// passes false: it parks again itself.
	Park bool
	// Depth asks for the key's depth and the message's eta in the answer when the admission
	// writes no depth count (Admitter.DueMarks false): one stream request (the key's
	// subject count) after the publish. Without it such an answer has Depth 0 and no ETA.
	// With DueMarks the count answers them anyway.
	Depth bool
	// First: the message is a submission admitted for the first time (no MsgID, no
	// attempt, never parked). Without DueMarks it is then written in the lean form
	// (queue.EnqueueNew), which only drainers of this version read: with DueMarks (the
	// claim engine, which v0.3 drainers may still run beside) it keeps the full form.
	First bool
}

// admission is one message between the steps of its admission (Admit, AdmitBatch).
type admission struct {
	r        *rules.Rule
	m        queue.Message
	o        Options
	now      time.Time
	capacity int64
	outflow  rules.Rate
	limRes   *bucket.Result // the admission limits' decision, when the rule has limits
	marked   bool           // its key was made due with its count (AdmitBatch): settle does not Mark
	// depth, when set, is the key's depth at this message, read for a whole batch
	// (AdmitBatch, Options.Depth without DueMarks): stored does not read it again.
	depth int64
}

// lean reports whether ad's message is written in the lean form (Options.First): never
// under DueMarks, which v0.3 drainers may read beside.
func (a *Admitter) lean(ad *admission) bool { return ad.o.First && !a.DueMarks }

// enqueue publishes ad's message, in the lean form when it may be (Admit's step 3).
func (a *Admitter) enqueue(ctx context.Context, ad *admission) (queue.Enqueued, error) {
	if a.lean(ad) {
		return a.Queues.EnqueueNew(ctx, ad.r.Name, ad.m)
	}
	return a.Queues.EnqueueAs(ctx, ad.r.Name, ad.m, ad.o.MsgID)
}

// prepare checks that r has a queue and fills in what every step needs.
func (a *Admitter) prepare(r *rules.Rule, m queue.Message, o Options) (admission, error) {
	if !r.HasQueue() {
		return admission{}, fmt.Errorf("admit: rule %q has no queue", r.Name)
	}
	ad := admission{r: r, m: m, o: o, now: a.now(), capacity: r.Queue.Capacity}
	ad.m.Rule = r.Name
	if ad.m.CreatedAt.IsZero() {
		ad.m.CreatedAt = ad.now
	}
	ad.outflow, _ = a.outflow(r)
	if a.CapacityOf != nil {
		ad.capacity = a.CapacityOf(r)
	}
	return ad, nil
}

// limited reports whether the rule's admission limits are decided for each message.
func (a *Admitter) limited(r *rules.Rule) bool {
	return len(r.RateLimits) > 0 && !r.Unlimited && a.Limits != nil
}

// limit decides the admission limits of ad (step 1): done with the answer when they refuse
// it (parked or rejected), or fail.
func (a *Admitter) limit(ctx context.Context, ad *admission) (res Result, done bool, err error) {
	if !a.limited(ad.r) {
		return Result{}, false, nil
	}
	r, m, now, capacity := ad.r, ad.m, ad.now, ad.capacity
	lres, err := a.Limits.Allow(ctx, LimitKey(r.Name, m.Key), Limits(r), 1, now)
	if err != nil {
		return Result{}, true, fmt.Errorf("%w: admission limit: %v", ErrUnavailable, err)
	}
	if lres.Allowed {
		ad.limRes = &lres
		return Result{}, false, nil
	}
	d := lres.Decision()
	out := Result{
		Reason: ReasonLimit, Capacity: capacity,
		Policy: policyName(r, lres), Limit: d.Limit, Remaining: d.Remaining,
		Reset: d.ResetAfter, Window: d.Window, RetryAfter: lres.RetryAfter(),
		Violated: violated(r, lres),
	}
	// The limiter decides in whole ms: from now's ms, RetryAfter ends exactly where
	// the window turns (not up to a ms later, which rounds retry_at a second late).
	retryAt := now.Truncate(time.Millisecond).Add(out.RetryAfter)
	if out.RetryAfter == bucket.Never { // the limit can never pass (requests_per_unit: 0)
		out.RetryAfter = max(d.Window, time.Second)
		retryAt = now.Add(r.Park.MaxAge)
	}
	res, err = a.refuse(ctx, r, m, ad.o, out, retryAt, ad.o.Park)
	return res, true, err
}

// taken answers a claim whose idempotency key another owns: nothing is stored (nor
// counted).
func (a *Admitter) taken(ad *admission, owner string) Result {
	ownerID, digest := queue.SplitIdempotencyValue(owner)
	if ad.o.RequestDigest != "" && digest != "" && digest != ad.o.RequestDigest {
		return Result{Decision: KeyReused, Owner: ownerID, Capacity: ad.capacity}
	}
	return Result{Decision: KeyTaken, Owner: ownerID, Capacity: ad.capacity}
}

// takes is the pipeline that takes single admissions' idempotency keys.
func (a *Admitter) takes() *queue.AdmitPipeline {
	if a.Takes != nil {
		return a.Takes
	}
	return a.Redis
}

// Admit admits m (m.Key, m.ID, m.Payload set) into rule r's queue.
func (a *Admitter) Admit(ctx context.Context, r *rules.Rule, m queue.Message, o Options) (Result, error) {
	ad, err := a.prepare(r, m, o)
	if err != nil {
		return Result{}, err
	}

	// 1. Admission limits.
	if res, done, err := a.limit(ctx, &ad); done {
		return res, err
	}

	// 2. With an idempotency key, claim it and wait: a key that is taken stores nothing.
	// Then count the message into the key's depth in Redis while it is published: the
	// answer needs the depth, and overlapping the two round trips is what makes admission
	// cost one of them, not both.
	claimed := false
	if o.IdempotencyKey != "" {
		value := queue.IdempotencyValue(m.ID, o.RequestDigest)
		switch owner, cerr := a.takes().Take(r.Name, o.IdempotencyKey, value); {
		case cerr != nil:
			a.throttledWarn("idempotency", "admit: idempotency key not checked (Redis unreachable)", "rule", r.Name, "err", cerr)
		case owner != value:
			return a.taken(&ad, owner), nil
		default:
			claimed = true
		}
	}
	var counted queue.Pending
	if a.DueMarks {
		counted = a.Redis.Count(r.Name, m.Key, ad.capacity, ad.now)
	}

	// 3. Enqueue: JetStream enforces the capacity atomically.
	var enq queue.Enqueued
	if telemetry.On() {
		enq, err = a.tracedEnqueue(ctx, &ad)
	} else {
		enq, err = a.enqueue(ctx, &ad)
	}
	var cres queue.Admitted
	var werr error
	if a.DueMarks {
		cres, werr = counted.Result()
	}
	return a.settle(ctx, &ad, cres, werr, claimed, enq, err)
}

// settle answers ad once its publish is answered (steps 3 and 4): cres and werr are its
// count's result, claimed whether it took its idempotency key, enq and err its publish's.
func (a *Admitter) settle(ctx context.Context, ad *admission, cres queue.Admitted, werr error, claimed bool, enq queue.Enqueued, err error) (Result, error) {
	r, m, o, now, capacity, outflow := ad.r, ad.m, ad.o, ad.now, ad.capacity, ad.outflow
	depth, next := cres.Depth, cres.Next
	full := errors.Is(err, queue.ErrFull)
	counted := a.DueMarks && werr == nil // this admission's count is in Redis
	if err != nil && !full && counted {
		a.Redis.Undo(r.Name, m.Key) // nothing was stored: take the count back
	}
	if full {
		// The refusal itself proves the key holds capacity messages: the count is set to
		// that (if it was not already), which is the truth. No stream request here: under a
		// flood this is the hot path.
		if counted && depth < capacity {
			a.Scheduler.Depths.SetDepth(ctx, r.Name, m.Key, capacity)
		}
		every := outflow.Every()
		drain := time.Duration(capacity) * every // the honest wait: the queue ahead drains at the outflow
		out := Result{
			Reason: ReasonQueueFull, Depth: capacity, Capacity: capacity,
			Policy: r.Name, Limit: capacity, Remaining: 0,
			Reset: every, Window: drain, RetryAfter: drain,
			Violated: []string{r.Name},
		}
		if werr == nil && next.After(now) {
			out.Reset = next.Sub(now) // one place frees when the head leaves at its slot
		}
		res, err := a.refuse(ctx, r, m, o, out, now.Add(drain), o.Park)
		res.Claimed = claimed
		return res, err
	}
	if errors.Is(err, queue.ErrRuleFull) {
		// The rule's stream is at its max_bytes: no key of this rule can be stored until its
		// messages drain; other rules are untouched. One message leaves every interval.
		every := outflow.Every()
		if r.Queue.TotalOutflow.Requests > 0 {
			every = min(every, r.Queue.TotalOutflow.Interval/time.Duration(r.Queue.TotalOutflow.Requests))
		}
		out := Result{
			Reason: ReasonRuleFull, Depth: max(depth, 1), Capacity: capacity,
			Policy: r.Name, Limit: capacity, Remaining: 0,
			Reset: every, Window: every, RetryAfter: max(every, time.Second),
			Violated: []string{r.Name},
		}
		res, err := a.refuse(ctx, r, m, o, out, now.Add(out.RetryAfter), o.Park)
		res.Claimed = claimed
		return res, err
	}
	if errors.Is(err, queue.ErrStoreFull) {
		return Result{}, fmt.Errorf("%w: %v", ErrStoreFull, err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}

	if !a.DueMarks {
		return a.stored(ctx, ad, claimed, enq), nil
	}
	// 4. The message is stored: make the key due. Not waited for — a mark lost to a crash
	// or an outage is repaired by the drainers' reconciler.
	if enq.Duplicate && werr == nil {
		a.Redis.Undo(r.Name, m.Key) // already counted when it was first stored
		depth--
	}
	if !ad.marked {
		a.Redis.Mark(r.Name, m.Key, now)
	}
	every := outflow.Every()
	if werr != nil {
		// Redis is unreachable: the answer is built from the stream's own count.
		a.throttledWarn("count", "admit: Redis unreachable; depth read from the stream, key left for the reconciler to schedule", "rule", r.Name, "err", werr)
		next = now
		if d, derr := a.Queues.Depth(ctx, r.Name, m.Key); derr == nil {
			depth = int64(d)
		} else {
			depth = 1 // at least this message: the headers are then a lower bound
		}
	}
	depth = max(1, min(depth, capacity))
	if next.Before(now) {
		next = now
	}
	// The messages that leave before this one, from next on: depth−1, less the head a
	// drainer is delivering right now (still counted, but next is already the slot after it).
	ahead := depth - 1
	if werr == nil && cres.Held {
		// Also when the held key is empty (re-claimed ahead of its slot after its last
		// message left): this message then takes the held slot, one interval before next.
		ahead--
	}
	out := Result{
		Decision: Queued, Duplicate: enq.Duplicate, Claimed: claimed,
		Depth: depth, Capacity: capacity,
		// This message leaves after those ahead of it, one outflow interval apart, starting
		// at the key's next slot (retries of the head can only delay it).
		ETA:    later(now, next.Add(time.Duration(ahead)*every)),
		Policy: r.Name, Limit: capacity, Remaining: capacity - depth,
		Reset: next.Sub(now), Window: time.Duration(capacity) * every,
	}
	if out.Reset <= 0 {
		out.Reset = every
	}
	reportTighter(&out, r, ad.limRes)
	return out, nil
}

// reportTighter makes out's rate-limit numbers the admission limit's (lim, when the rule
// has one) when out has none, or when the limit has fewer requests left than the queue has
// places: the tighter policy is the one to report.
func reportTighter(out *Result, r *rules.Rule, lim *bucket.Result) {
	if lim == nil {
		return
	}
	if d := lim.Decision(); out.Policy == "" || d.Remaining < out.Remaining {
		out.Policy, out.Limit, out.Remaining, out.Reset, out.Window = policyName(r, *lim), d.Limit, d.Remaining, d.ResetAfter, d.Window
	}
}

// stored answers a message stored without a depth count (Admitter.DueMarks false): the
// own engine's drainers learn of it from its publish, so nothing is written anywhere else.
// Depth and ETA stay zero (unknown) unless Options.Depth asks for them: the key's subject
// count from the stream (one request), and the eta as if the messages ahead left one
// outflow interval apart from now — an estimate, the owner's pacing is in its memory. The
// rate-limit numbers are then the queue's; without depth they are the admission limit's,
// when the rule has one, or none (Policy "").
func (a *Admitter) stored(ctx context.Context, ad *admission, claimed bool, enq queue.Enqueued) Result {
	r, now, capacity := ad.r, ad.now, ad.capacity
	out := Result{Decision: Queued, Duplicate: enq.Duplicate, Claimed: claimed, Capacity: capacity}
	every := ad.outflow.Every()
	if ad.o.Depth {
		depth := int64(1) // at least this message: a lower bound if the stream cannot say
		if ad.depth > 0 {
			depth = ad.depth
		} else if d, err := a.Queues.Depth(ctx, r.Name, ad.m.Key); err == nil {
			depth = int64(d)
		} else {
			a.throttledWarn("depth", "admit: the key's depth could not be read from the stream; answered as 1", "rule", r.Name, "err", err)
		}
		depth = max(1, min(depth, capacity))
		out.Depth = depth
		out.ETA = now.Add(time.Duration(depth-1) * every)
		out.Policy, out.Limit, out.Remaining = r.Name, capacity, capacity-depth
		out.Reset, out.Window = every, time.Duration(capacity)*every
	}
	reportTighter(&out, r, ad.limRes)
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// refuse parks m (overflow: park) or rejects it.
func (a *Admitter) refuse(ctx context.Context, r *rules.Rule, m queue.Message, o Options, out Result, retryAt time.Time, allowPark bool) (Result, error) {
	if !allowPark || r.Overflow != rules.OverflowPark {
		out.Decision = Rejected
		if out.RetryAfter <= 0 {
			out.RetryAfter = time.Second
		}
		return out, nil
	}
	if a.Parking == nil {
		return Result{}, fmt.Errorf("%w: no retry stream to park in", ErrUnavailable)
	}
	m.LastError = out.Reason
	fire, err := a.Parking.Park(ctx, r.Name, m, retryAt)
	if errors.Is(err, retry.ErrFull) {
		// The retry stream is nearly full: refuse rather than drop older parked messages.
		out.Decision = Rejected
		if out.RetryAfter <= 0 {
			out.RetryAfter = time.Second
		}
		return out, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: park: %v", ErrUnavailable, err)
	}
	out.Decision = Parked
	out.RetryAt = fire
	out.RetryAfter = 0
	out.Violated = nil
	return out, nil
}

// Readmit is a retry.AdmitFunc: it puts a parked message (or a dead letter being
// replayed) back into its key's queue, without parking it on refusal.
func (a *Admitter) Readmit(ctx context.Context, r *rules.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
	res, err := a.Admit(ctx, r, m, Options{MsgID: msgID})
	if err != nil {
		return retry.AdmitResult{}, err
	}
	return a.ReadmitResult(res), nil
}

// ReadmitResult is what Readmit answers for an admission's result: admitted, or when to try
// again (the window of an admission limit, or room in a full queue).
func (a *Admitter) ReadmitResult(res Result) retry.AdmitResult {
	switch {
	case res.Decision == Queued:
		return retry.AdmitResult{Outcome: retry.Admitted}
	case res.Reason == ReasonLimit:
		return retry.AdmitResult{Outcome: retry.WindowClosed, RetryAt: a.now().Add(res.RetryAfter)}
	default:
		return retry.AdmitResult{Outcome: retry.Full, RetryAt: a.now().Add(res.RetryAfter)}
	}
}

func policyName(r *rules.Rule, res bucket.Result) string {
	if d := res.Index; d >= 0 && d < len(r.RateLimits) && r.RateLimits[d].Name != "" {
		return r.RateLimits[d].Name
	}
	return r.Name
}

func violated(r *rules.Rule, res bucket.Result) []string {
	var out []string
	for i := 0; i < res.N && i < len(r.RateLimits); i++ {
		if !res.Decisions[i].Allowed && !r.ShadowMode {
			name := r.RateLimits[i].Name
			if name == "" {
				name = r.Name
			}
			out = append(out, name)
		}
	}
	return out
}

func (a *Admitter) throttledWarn(what, msg string, args ...any) {
	a.logMu.Lock()
	if a.lastLog == nil {
		a.lastLog = map[string]time.Time{}
	}
	t := a.lastLog[what]
	now := time.Now()
	ok := now.Sub(t) >= 10*time.Second
	if ok {
		a.lastLog[what] = now
	}
	a.logMu.Unlock()
	if ok && a.Logger != nil {
		a.Logger.Warn(msg, args...)
	}
}
