package queue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed claim.lua
	claimSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed release_fn.lua
	releaseFnSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed step.lua
	stepSrc string

	// claim.lua and release.lua share release_keys (release_fn.lua): Redis scripts cannot
	// include each other, so the function is prepended to both.
	claimScript   = redis.NewScript(releaseFnSrc + claimSrc)
	releaseScript = redis.NewScript(releaseFnSrc + releaseSrc)
	renewScript   = redis.NewScript(renewSrc)
	stepScript    = redis.NewScript(stepSrc)

	//go:embed unlock.lua
	unlockSrc    string
	unlockScript = redis.NewScript(unlockSrc)

	lockSeq atomic.Uint64
)

// SchedulerConfig configures a Scheduler. The zero value is usable.
type SchedulerConfig struct {
	// Prefix is prepended to every Redis key (before the "sl:{rule}:" part), so tests and
	// several deployments can share one Redis. It must not contain '{' or '}'. Default "".
	Prefix string
	// Clock returns the current time for MarkDue. Default nil: Redis's own clock (TIME in
	// the script), the clock claims and leases use too.
	Clock func() time.Time
	// Partitions returns a rule's partition count (the rules file's queue.partitions); 0 or
	// a nil func: DefaultPartitions of the client (1 on a single Redis, ClusterPartitions on
	// a Redis Cluster). Every process sharing the Redis must answer the same for a rule, but
	// a change (a rules reload) loses nothing: see partition.go.
	Partitions func(rule string) int
	// LegacyIdempotency claims idempotency keys in v0.3's layout
	// (<prefix>sl:idem:{<rule>}:<k>), the one key every version then claims, so that during a
	// rolling upgrade from v0.3 a repeat is recognised whichever version admitted the first
	// request; this version's layout is written too once a claim took the key. It costs one
	// more round trip per first use of a key: turn it off once no v0.3 ingress is left and
	// the idempotency TTL has passed.
	LegacyIdempotency bool
}

// Scheduler coordinates the outflow of every key of every queue rule across any number of
// drainers, in Redis. Per rule it keeps a sorted set of keys that have messages, scored by
// the time their next message may leave; drainers claim due keys with one Lua script that
// paces each key (outflow) and the rule as a whole (total_outflow) and leases the claimed
// keys, so the pacing is exact however many drainers run.
//
// Redis keys of rule R, per partition (partition.go: a key's partition is a hash of the key;
// t = RuleToken(R), and the tag T is t for partition 0 and t.i-j for partition i > 0, see
// partTag), so every script touches one slot and runs on Redis Cluster, and one rule spreads
// over its masters:
//
//	<prefix>sl:{T}:due    ZSET    key -> next due time, µs since the epoch (keys with messages, unclaimed)
//	<prefix>sl:{T}:lease  ZSET    key -> lease expiry, µs (claimed keys)
//	<prefix>sl:{T}:held   HASH    key -> "<owner>#<fence> <next due µs>" (claimed keys)
//	<prefix>sl:{T}:dirty  HASH    key -> "1" (MarkDue ran while the key was claimed)
//	<prefix>sl:{t}:total  STRING  total_outflow meter: µs the rule's next message may leave (one
//	                              per rule: partition 0's; partitions i > 0 reserve from it, meter.lua)
//	<prefix>sl:{T}:try    HASH    key -> "<msg id>\n<attempts>\n<last error>" (head being retried)
//	<prefix>sl:{T}:depth:<b>  HASH  key -> messages queued, the ingress's estimate (admit.lua;
//	                              releases count deliveries out, Reconcile resets it), in the
//	                              key's bucket b of 16,384 (partition.go, "Depth buckets")
//	<prefix>sl:{T}:idle   ZSET    key -> unused slot of a key that emptied, until it passes
//	<prefix>sl:{T}:fence  STRING  the last fencing token handed to a claim (one per partition)
//	<prefix>sl:{t}:lock:reconcile  STRING  one Reconcile scan per rule at a time
//	<prefix>sl:{t}:parts  STRING  the highest partition count any process used for the rule
//
// Members are the keys themselves (Redis strings are binary-safe). Only keys that have
// messages (or are being retried) cost memory; a drained key is removed.
//
// Format versions of this state, told apart by the shape of a held entry (there is no
// version key: every script already reads the entry it acts on):
//
//	1  v0.3.0: held is "<owner> <next>"; no fence or parts keys; one partition per rule
//	   (the keys of partition 0 above, sl:{t}:…).
//	2  this tree: held is "<owner>#<fence> <next>"; adds sl:{T}:fence and sl:{t}:parts. At
//	   one partition (every rule on a single Redis, and `partitions: 1` on a cluster) the
//	   key names are version 1's, but for the depth counters: earlier versions kept them in
//	   one hash per partition, sl:{T}:depth, which this tree neither reads nor writes and
//	   Reconcile deletes (dropLegacyDepths).
//
// A mixed fleet (a rolling upgrade) works on one Redis because each script reads both
// shapes where it must: handing back an expired lease (claim.lua) and reading a held key's
// next slot (admit.lua, both releases) take the last field, whatever precedes it;
// a release, renewal, step or move acts only on an entry that names this drainer, and an
// entry of the other shape never does (v0.3.0 compares "<owner>#<fence>" with its bare
// owner, this tree finds no '#' in a v0.3.0 entry), so each version only ever releases its
// own claims and takes the other's back once their lease expires — v0.3.0's lease is 30 s.
// Tested with the v0.3.0 binaries in integration TestRollingUpgrade.
//
// One clock: slots, leases and due times are Redis's time (TIME inside the scripts), never a
// drainer's, so drainers whose clocks disagree still pace every key exactly; Claimed.Now
// tells a drainer Redis's time, and it waits for a slot by the difference. Methods that take
// a time (Claim, Renew, MarkDueAt) use it instead, for tests; the zero time means Redis's.
//
// Fencing: every claim of a key carries a token (Claim.Fence) larger than any token handed
// out before in its partition, so for the key (a key stays in its partition while the rule's
// partition count stays; tokens are also never below Redis's time in µs, so they keep growing
// when a key changes partition, see claim.lua). Releases and renewals name it: a drainer whose
// lease expired, and whose key was claimed again (by another drainer or by itself), is
// refused. Drainers send it to the sink (Sluice-Fence), so a sink can drop a delivery from a
// drainer that lost its claim.
//
// A Scheduler is safe for concurrent use. Its methods take the outflow parameters from the
// caller, so live overrides change them without touching Redis state.
//
// Scheduler is one field per concept, each a view of the same Redis client and key layout
// (store): Ownership (the own engine's partition leases), Meter (slots: the total_outflow
// meter, a claim holder's next slot), Claims (the claim engine's due set and key leases),
// Depths (the ingress's per-key depth counters and what reads them), Idempotency, SinkSlots
// (in-flight caps), Steering (breakers and steering state) and Rates (cluster-wide counts).
// What concerns the whole Redis layer (Ping, Partitions, DeleteRule) is on Scheduler itself.
type Scheduler struct {
	*store

	Ownership   Ownership
	Meter       Meter
	Claims      Claims
	Depths      Depths
	Idempotency Idempotency
	SinkSlots   SinkSlots
	Steering    Steering
	Rates       Rates
}

// store is the Redis client and the key layout every concept type shares; the helpers the
// concepts have in common (key names, partitions, locks, pipe steps) are its methods.
type store struct {
	rdb      redis.UniversalClient
	prefix   string
	clock    func() time.Time
	parts    func(rule string) int
	defParts int
	layouts  sync.Map // rule -> layout
	nexts    sync.Map // rule -> *[]int64: each partition's earliest due time at the last claim
	refunds  refunds
	rr       atomic.Uint64 // where the next claim starts visiting partitions

	legacyIdem bool // SchedulerConfig.LegacyIdempotency
}

// Ownership is the drainers' own engine in Redis (ownership.go, own.lua): leases on whole
// ownership partitions with fencing tokens, the pace and retry state a new owner takes over,
// and the due marks it clears.
type Ownership struct{ *store }

// Meter hands out slots: the rule's total_outflow meter (Reserve, meter.lua), a claim
// holder's next slot of a key (Step) and when a key's next message may leave (NextSlot).
type Meter struct{ *store }

// Claims is the claim engine (claim.lua and friends): the due set the ingress marks keys in,
// and the leases drainers claim, renew and release keys under.
type Claims struct{ *store }

// Depths is the per-key depth counters the ingress keeps (admit.lua) and what reads the
// per-key state: SetDepth heals a counter, ResetDepths and Uncount forget, HotKeys and
// KeyState read.
type Depths struct{ *store }

// Idempotency maps a rule's idempotency keys to the first message admitted under them
// (idempotency.go): Take takes a key, Release gives it back.
type Idempotency struct{ *store }

// SinkSlots caps a rule's deliveries in flight across drainers (inflight.go, inflight.lua).
type SinkSlots struct{ *store }

// Steering is the state drainers share to steer a rule (steerstate.go): each drainer's sink
// breaker and throttled keys' adaptive state for a new owner.
type Steering struct{ *store }

// Rates is the cluster-wide counts of refusals and deliveries (stats.go), per ten seconds,
// and their rates over the last minute.
type Rates struct{ *store }

// NewScheduler returns a Scheduler on rdb (a *redis.Client, *redis.ClusterClient, …).
func NewScheduler(rdb redis.UniversalClient, cfg SchedulerConfig) (*Scheduler, error) {
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("queue: scheduler prefix %q must not contain '{' or '}'", cfg.Prefix)
	}
	st := &store{rdb: rdb, prefix: cfg.Prefix, clock: cfg.Clock, parts: cfg.Partitions, defParts: DefaultPartitions(rdb),
		legacyIdem: cfg.LegacyIdempotency}
	return &Scheduler{store: st, Ownership: Ownership{st}, Meter: Meter{st}, Claims: Claims{st}, Depths: Depths{st},
		Idempotency: Idempotency{st}, SinkSlots: SinkSlots{st}, Steering: Steering{st}, Rates: Rates{st}}, nil
}

type ruleKeys struct{ due, lease, held, dirty, total, try, depth, idle, fence string }

// keys returns the keys of rule's partition 0, which also holds the rule-wide keys (the
// total_outflow meter, locks, counts).
func (s *store) keys(rule string) ruleKeys { return s.part(rule, 0) }

// all lists the rule's keys in the order the scripts take them as KEYS.
func (k ruleKeys) all() []string {
	return []string{k.due, k.lease, k.held, k.dirty, k.total, k.try, k.depth, k.idle, k.fence}
}

// Outflow is a rule's pacing, as the caller currently wants it (rules file or live override).
type Outflow struct {
	Every      time.Duration // spacing between two messages of one key (1/outflow); 0 = unpaced
	TotalEvery time.Duration // spacing between two messages of the rule (1/total_outflow); 0 = none
}

// ClaimRequest says what one drainer wants from Claim.
type ClaimRequest struct {
	Outflow
	Owner string // drainer id; no spaces and no '#' (e.g. a uuid)
	Max   int    // claim at most this many keys (the drainer's idle workers)
	// Lookahead also claims keys whose slot comes within this time; the drainer waits for
	// the slot itself, so a message leaves on time instead of one poll late. 0 = only due keys.
	Lookahead time.Duration
	// Lease is how long after its slot a claim stays valid unless renewed (Renew): a drainer
	// that has neither released nor renewed the key by then is presumed dead and the key goes
	// back to be claimed by another.
	Lease time.Duration
	// Reclaim recovers at most this many expired leases per call. Default 100.
	Reclaim int
	// Releases are keys Owner hands back before claiming, in the same round trip (see
	// Release): a drainer batches the keys it finished with into its next claim.
	Releases []Release
}

// RetryState is the retry bookkeeping of a key's head message under strict ordering: the
// message stays at the head of its queue, and this records how often it failed.
type RetryState struct {
	MsgID     string
	Attempts  int // attempts made so far
	LastError string
}

// maxLastError bounds the last error stored in Redis and in headers.
const maxLastError = 1024

func (r RetryState) encode() string {
	e := r.LastError
	if len(e) > maxLastError {
		e = e[:maxLastError]
	}
	return r.MsgID + "\n" + strconv.Itoa(r.Attempts) + "\n" + e
}

func decodeRetryState(s string) (RetryState, bool) {
	id, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return RetryState{}, false
	}
	n, e, _ := strings.Cut(rest, "\n")
	a, err := strconv.Atoi(n)
	if err != nil {
		return RetryState{}, false
	}
	return RetryState{MsgID: id, Attempts: a, LastError: e}, true
}

// Claim is one key claimed for one drainer.
type Claim struct {
	Key  string
	Slot time.Time // the key's message may leave at this time, not before
	Due  time.Time // when the key became due (Slot − Due is scheduling delay)
	// Retry is the retry state of the key's head message, if it failed before. Compare
	// Retry.MsgID with the popped message: a different id means the state is stale.
	Retry *RetryState
	// Fence is the claim's fencing token: larger than every earlier claim's of its partition
	// (so of the key; see claim.lua). Renew and Release name it; the drainer sends it to the
	// sink.
	Fence int64
}

// Claimed is the result of Claim.
type Claimed struct {
	Claims []Claim
	// Next is when the next unclaimed slot of the rule comes (earliest due key, or the
	// total_outflow meter if later); zero when no key is due at all.
	Next time.Time
	// Lost counts ClaimRequest.Releases whose claim Owner no longer held (ErrLeaseLost).
	Lost int
	// Now is the time the claim was made at: Redis's clock (or the time given to Claim).
	// Slot.Sub(Now) is how long the drainer waits before delivering.
	Now time.Time
}

func us(t time.Time) int64 { return t.UnixMicro() }

func fromUS(v int64) time.Time { return time.UnixMicro(v) }

// usOrZero is t in µs, or 0 (the scripts then read Redis's clock) for the zero time.
func usOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return us(t)
}

// Claim claims up to req.Max keys of rule whose slot is at most now+req.Lookahead, lowest
// due first, and paces them: each claimed key's next due time becomes slot+Every, the rule's
// total_outflow meter advances by TotalEvery per claim. Claimed keys are leased to
// req.Owner until Release (or until Slot+Lease, or the last Renew+Lease, when another
// drainer may claim them again). now is Redis's clock when zero (what drainers pass); tests
// give a time to claim at fixed instants.
func (s Claims) Claim(ctx context.Context, rule string, now time.Time, req ClaimRequest) (Claimed, error) {
	if req.Owner == "" || strings.ContainsAny(req.Owner, " \n#") {
		return Claimed{}, fmt.Errorf("queue: claim: bad owner %q", req.Owner)
	}
	if req.Reclaim <= 0 {
		req.Reclaim = 100
	}
	// Scripts pass a batch to one Redis command with unpack(), which Lua bounds (~8000
	// values): keep batches well below that.
	req.Max = min(req.Max, maxBatch)
	for len(req.Releases) > maxBatch {
		if _, err := s.Release(ctx, rule, req.Owner, req.TotalEvery, req.Releases[:maxBatch]...); err != nil && !errors.Is(err, ErrLeaseLost) {
			return Claimed{}, err
		}
		req.Releases = req.Releases[maxBatch:]
	}
	p, n := s.layout(ctx, rule)
	if n == 1 {
		return s.claimOne(ctx, rule, now, req)
	}
	return s.claimParts(ctx, rule, now, req, p, n)
}

// claimOne claims from a rule in one partition: one script, the meter inside it.
func (s *store) claimOne(ctx context.Context, rule string, now time.Time, req ClaimRequest) (Claimed, error) {
	args := make([]any, 0, 9+6*len(req.Releases))
	args = append(args, usOrZero(now), req.Max, req.Lookahead.Microseconds(), req.Every.Microseconds(),
		req.TotalEvery.Microseconds(), req.Lease.Microseconds(), req.Owner, req.Reclaim, -1)
	args = appendReleases(args, req.Releases)
	out, _, _, err := parseClaimed(claimScript.Run(ctx, s.rdb, s.keys(rule).all(), args...))
	if err != nil {
		return Claimed{}, fmt.Errorf("queue: claim rule %q: %w", rule, err)
	}
	return out, nil
}

// parseClaimed reads claim.lua's reply: the claims, the released keys that were lost, and
// how many emptied keys' total_outflow slots are to be given back.
func parseClaimed(cmd *redis.Cmd) (out Claimed, lostKeys []string, refunds int64, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return Claimed{}, nil, 0, err
	}
	lost := int64(-1)
	if len(res) >= 4 {
		lost, _ = res[1].(int64)
	}
	if lost < 0 || len(res) < 4+int(lost) || (len(res)-4-int(lost))%5 != 0 {
		return Claimed{}, nil, 0, errUnexpected(len(res))
	}
	if next, _ := res[0].(int64); next >= 0 {
		out.Next = fromUS(next)
	}
	out.Lost = int(lost)
	nowUS, _ := res[2].(int64)
	out.Now = fromUS(nowUS)
	refunds, _ = res[3].(int64)
	for _, v := range res[4 : 4+lost] {
		k, _ := v.(string)
		lostKeys = append(lostKeys, k)
	}
	first := 4 + int(lost)
	if n := (len(res) - first) / 5; n > 0 {
		out.Claims = make([]Claim, 0, n)
	}
	for i := first; i < len(res); i += 5 {
		key, _ := res[i].(string)
		slot, _ := res[i+1].(int64)
		due, _ := res[i+2].(int64)
		fence, _ := res[i+4].(int64)
		c := Claim{Key: key, Slot: fromUS(slot), Due: fromUS(due), Fence: fence}
		if t, ok := res[i+3].(string); ok {
			if rs, ok := decodeRetryState(t); ok {
				c.Retry = &rs
			}
		}
		out.Claims = append(out.Claims, c)
	}
	return out, lostKeys, refunds, nil
}

func errUnexpected(n int) error { return fmt.Errorf("unexpected reply of %d values", n) }

// ReleaseMode says what happened to a claimed key's head.
type ReleaseMode string

const (
	// Released: the head was delivered (or dead) and deleted; the key is due again at its
	// next slot (or At, if later) and its retry state is cleared.
	Released ReleaseMode = "next"
	// Retrying: the head stays queued and is retried at At (or the key's next slot, if
	// later); State records the failure. Later messages of the key wait behind it.
	Retrying ReleaseMode = "retry"
	// Later: the head stays queued and nothing is held against it (the pop or delivery could
	// not be attempted, e.g. NATS was unreachable); the key is due again at At (or its next
	// slot, if later) and its retry state is kept.
	Later ReleaseMode = "later"
	// Emptied: the key had no message. It leaves the due set unless MarkDue ran since the
	// claim; the unused total_outflow slot is given back. At should be the claim's Slot: a
	// message arriving later is never due before it (see release_fn.lua).
	Emptied ReleaseMode = "empty"
)

// Release is one claimed key handed back.
type Release struct {
	Key   string
	Mode  ReleaseMode
	At    time.Time  // Retrying: when to retry; Released: optional earliest next time (Redis's clock)
	State RetryState // Retrying only
	// Fence is the claim's token (Claim.Fence): the release applies only if the key is still
	// held under it. 0 checks the owner only.
	Fence int64
}

// ErrLeaseLost is returned (wrapped) by Release for keys whose claim the owner no longer
// held: the lease had expired and the key went back to be claimed by others. Nothing was
// changed for those keys.
var ErrLeaseLost = errors.New("queue: claim lease lost")

// Release hands claimed keys back in one round trip. totalEvery is the rule's current
// total_outflow spacing (to give back an unused slot of an emptied key). It returns, per
// release, whether owner still held the key; the error wraps ErrLeaseLost if any was lost.
func (s Claims) Release(ctx context.Context, rule, owner string, totalEvery time.Duration, rels ...Release) ([]bool, error) {
	if len(rels) == 0 {
		return nil, nil
	}
	if len(rels) > maxBatch {
		head, err := s.Release(ctx, rule, owner, totalEvery, rels[:maxBatch]...)
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			return head, err
		}
		tail, err2 := s.Release(ctx, rule, owner, totalEvery, rels[maxBatch:]...)
		if err2 == nil {
			err2 = err
		}
		return append(head, tail...), err2
	}
	p, n := s.layout(ctx, rule)
	held := make([]bool, len(rels))
	byPart := make(map[int][]int, min(n, len(rels)))
	for j, r := range rels {
		i := PartitionOf(r.Key, p)
		byPart[i] = append(byPart[i], j)
	}
	err := s.release(ctx, rule, owner, totalEvery, rels, byPart, held)
	if err == nil && n > 1 {
		// A key claimed before the rule's partition count changed is held in its old
		// partition: look for the lost ones in the others (one more round trip, only then).
		var lost []int
		for j, h := range held {
			if !h {
				lost = append(lost, j)
			}
		}
		if len(lost) > 0 {
			again := make(map[int][]int, n)
			for i := range n {
				for _, j := range lost {
					if PartitionOf(rels[j].Key, p) != i {
						again[i] = append(again[i], j)
					}
				}
			}
			err = s.release(ctx, rule, owner, totalEvery, rels, again, held)
		}
	}
	if err != nil {
		return held, fmt.Errorf("queue: release keys of rule %q: %w", rule, err)
	}
	lost := 0
	for _, h := range held {
		if !h {
			lost++
		}
	}
	if lost > 0 {
		return held, fmt.Errorf("%w: %d of %d keys of rule %q", ErrLeaseLost, lost, len(rels), rule)
	}
	return held, nil
}

// release runs release.lua for rels[j], j in byPart[i], in partition i, in one pipelined
// round trip, and sets held[j] for those released. Partition 0's script gives an emptied
// key's unused total_outflow slot back to the meter (which is in its slot); other
// partitions' are given back with the rule's next reservation (partition.go).
func (s *store) release(ctx context.Context, rule, owner string, totalEvery time.Duration, rels []Release, byPart map[int][]int, held []bool) error {
	calls := make([]*call, 0, len(byPart))
	parts := make([]int, 0, len(byPart))
	for i, js := range byPart {
		te := totalEvery.Microseconds()
		if i != 0 {
			te = 0
		}
		args := make([]any, 0, 2+6*len(js))
		args = append(args, owner, te)
		for _, j := range js {
			args = appendReleases(args, rels[j:j+1])
		}
		calls = append(calls, &call{script: releaseScript, keys: s.part(rule, i).all(), args: args})
		parts = append(parts, i)
	}
	s.runAll(ctx, calls)
	var firstErr error
	for x, c := range calls {
		i := parts[x]
		res, err := c.cmd.Int64Slice()
		if err == nil && len(res) != len(byPart[i]) {
			err = errUnexpected(len(res))
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for y, j := range byPart[i] {
			if res[y] == 1 {
				held[j] = true
				if i != 0 && totalEvery > 0 && rels[j].Mode == Emptied {
					s.refunds.add(rule, 1)
				}
			}
		}
	}
	return firstErr
}

func appendReleases(args []any, rels []Release) []any {
	for _, r := range rels {
		var at int64
		if !r.At.IsZero() {
			at = us(r.At)
		}
		state := ""
		if r.Mode == Retrying {
			state = r.State.encode()
		}
		args = append(args, r.Key, string(r.Mode), at, state, r.Fence, depthBucket(r.Key))
	}
	return args
}

// maxBatch bounds the keys of one claim or release script call (see Claim).
const maxBatch = 1000

// markDueBatch bounds the keys of one MarkDue script call, so a large batch (reconciler)
// does not block Redis for long.
const markDueBatch = 1000

// MarkDue makes keys of rule due now (Redis's clock, or SchedulerConfig.Clock); the ingress calls it after each
// successful publish. A key already due keeps its place and pacing; a claimed key is
// flagged so its drainer does not drop it (see admit.lua). Many keys go in one round trip
// per 1000.
func (s Claims) MarkDue(ctx context.Context, rule string, keys ...string) error {
	var now time.Time
	if s.clock != nil {
		now = s.clock()
	}
	_, err := s.MarkDueAt(ctx, rule, now, keys...)
	return err
}

// MarkDueAt is MarkDue at an explicit time (zero: Redis's clock); it returns how many keys
// were newly added.
func (s Claims) MarkDueAt(ctx context.Context, rule string, now time.Time, keys ...string) (int, error) {
	added := 0
	for i, ks := range s.byPartition(rule, keys) {
		k := s.part(rule, i)
		for len(ks) > 0 {
			n := min(len(ks), markDueBatch)
			args := make([]any, 0, n+2)
			args = append(args, usOrZero(now), n)
			for _, key := range ks[:n] {
				args = append(args, key)
			}
			// admit.lua with marks alone: its answer is {added}.
			vals, err := admitScript.Run(ctx, s.rdb, k.admitKeys(), args...).Int64Slice()
			if err == nil && len(vals) != 1 {
				err = fmt.Errorf("admit.lua answered %v to marks alone", vals)
			}
			if err != nil {
				return added, fmt.Errorf("queue: mark due in rule %q: %w", rule, err)
			}
			added += int(vals[0])
			ks = ks[n:]
		}
	}
	return added, nil
}

// Counts returns how many keys of rule are due (waiting for a slot) and claimed, summed over
// its partitions (one pipelined round trip).
func (s Claims) Counts(ctx context.Context, rule string) (due, claimed int64, err error) {
	_, n := s.layout(ctx, rule)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, 2*n)
	for i := range n {
		k := s.part(rule, i)
		cmds = append(cmds, pipe.ZCard(ctx, k.due), pipe.ZCard(ctx, k.lease))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("queue: counts of rule %q: %w", rule, err)
	}
	for j := 0; j < len(cmds); j += 2 {
		due += cmds[j].Val()
		claimed += cmds[j+1].Val()
	}
	return due, claimed, nil
}

// NextSlot returns when key's next message may leave (its due time, or for a claimed key the
// slot after the current one); ok is false when the key is not scheduled (no messages).
func (s Meter) NextSlot(ctx context.Context, rule, key string) (t time.Time, ok bool, err error) {
	k := s.home(rule, key)
	pipe := s.rdb.Pipeline()
	d := pipe.ZScore(ctx, k.due, key)
	h := pipe.HGet(ctx, k.held, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return time.Time{}, false, fmt.Errorf("queue: next slot in rule %q: %w", rule, err)
	}
	if d.Err() == nil {
		return fromUS(int64(d.Val())), true, nil
	}
	if h.Err() == nil {
		if _, v, ok := strings.Cut(h.Val(), " "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return fromUS(n), true, nil
			}
		}
	}
	return time.Time{}, false, nil
}

// setDepths overwrites the depth counters of the given keys: one HSET per depth bucket,
// pipelined 1,000 at a time.
func (s *store) setDepths(ctx context.Context, rule string, depths map[string]uint64) error {
	p := s.partitions(rule)
	parts := make([]ruleKeys, p)
	for i := range parts {
		parts[i] = s.part(rule, i)
	}
	buckets := map[string][]any{}
	for k, n := range depths {
		dk := parts[PartitionOf(k, p)].depthOf(k)
		buckets[dk] = append(buckets[dk], k, n)
	}
	pipe := s.rdb.Pipeline()
	for dk, kv := range buckets {
		pipe.HSet(ctx, dk, kv...)
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// dropLegacyDepths deletes the single depth hash per partition that versions before depth
// buckets kept (partition.go): Reconcile calls it once it has set every key's depth from the
// stream. Processes of such a version still running count in it again, for their own
// answers' headers only; it is dropped again by the next forced Reconcile.
func (s *store) dropLegacyDepths(ctx context.Context, rule string) error {
	_, n := s.layout(ctx, rule)
	pipe := s.rdb.Pipeline()
	for i := range n {
		pipe.Del(ctx, s.part(rule, i).depth)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// lock takes a named per-rule lock for ttl (SET NX PX); unlock releases it if still ours.
func (s *store) lock(ctx context.Context, rule, name string, ttl time.Duration) (unlock func(), ok bool, err error) {
	key := s.prefix + "sl:{" + RuleToken(rule) + "}:lock:" + name
	token := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatUint(uint64(lockSeq.Add(1)), 36)
	ok, err = s.rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil || !ok {
		return func() {}, false, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		unlockScript.Run(ctx, s.rdb, []string{key}, token)
	}, true, nil
}

// DeleteRule removes every Redis key of rule (the queue rule was removed).
func (s *Scheduler) DeleteRule(ctx context.Context, rule string) error {
	c := s.rdb
	// The fence counter stays: a rule added again keeps handing out growing tokens, so a
	// sink that remembers the last token of a key never sees one go backwards.
	// One DEL per partition: a DEL's keys must share a slot on a Redis Cluster.
	_, n := s.layout(ctx, rule)
	pipe := c.Pipeline()
	for i := range n {
		k := s.part(rule, i)
		keys := []string{k.due, k.lease, k.held, k.dirty, k.total, k.try, k.idle} // depths: delDepths below
		if i == 0 {
			keys = append(keys, s.prefix+"sl:{"+RuleToken(rule)+"}:lock:reconcile", s.prefix+"sl:{"+RuleToken(rule)+"}:parts")
		}
		pipe.Del(ctx, keys...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("queue: delete scheduler state of rule %q: %w", rule, err)
	}
	for i := range n {
		if err := s.delDepths(ctx, s.part(rule, i)); err != nil {
			return fmt.Errorf("queue: delete scheduler state of rule %q: %w", rule, err)
		}
	}
	s.layouts.Delete(rule)
	s.nexts.Delete(rule)
	return nil
}

// Ping reports whether Redis answers (drainers pause claiming while it does not).
func (s *Scheduler) Ping(ctx context.Context) error {
	c := s.rdb
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("queue: redis: %w", err)
	}
	return nil
}

// Held names one claim to renew: the key and its claim's fencing token.
type Held struct {
	Key   string
	Fence int64
}

// Renewed is the result of Renew.
type Renewed struct {
	// Held says, per key given, whether owner still held it under its fence; the lease of
	// each held key now ends at Now+lease. A key not held any more must not be delivered.
	Held []bool
	// Now is the time of the renewal (Redis's clock, or the time given).
	Now time.Time
}

// Step gives the holder of a claim the key's next slot without releasing the key (see
// step.lua): for a key with several deliveries in flight, called once a message has been
// taken from the key's queue. The slot obeys the key's outflow and the rule's
// total_outflow as a claim's does; the lease is extended to the slot plus lease. held is
// false (and slot zero) when owner no longer holds the key under fence.
func (s Meter) Step(ctx context.Context, rule, owner, key string, fence int64, now time.Time, out Outflow, lease time.Duration) (slot, at time.Time, held bool, err error) {
	p := s.partitions(rule)
	i := PartitionOf(key, p)
	k := s.part(rule, i)
	// Partition 0 holds the rule's meter: its script advances it. Another partition's key
	// reserves its slot from the meter first (meter.lua), at or after the key's own next
	// time, which the first step tells when the reserved slot is earlier.
	given := int64(-1)
	var floor int64
	every := out.TotalEvery.Microseconds()
	for attempt := 0; ; attempt++ {
		if i != 0 {
			given = 0
			if every > 0 {
				r, err := s.meter(ctx, rule, now, out.TotalEvery, 1, -1, floor, s.refunds.take(rule), 0, 0)
				if err != nil {
					return time.Time{}, time.Time{}, false, fmt.Errorf("queue: step key of rule %q: total_outflow meter: %w", rule, err)
				}
				given = r.first
			}
		}
		res, err := stepScript.Run(ctx, s.rdb, []string{k.lease, k.held, k.total, k.depthOf(key)},
			usOrZero(now), out.Every.Microseconds(), every, lease.Microseconds(), owner, key, fence, given).Int64Slice()
		if err == nil && len(res) != 3 {
			err = errUnexpected(len(res))
		}
		if err != nil {
			return time.Time{}, time.Time{}, false, fmt.Errorf("queue: step key of rule %q: %w", rule, err)
		}
		if res[1] != 0 {
			return fromUS(res[1]), fromUS(res[0]), true, nil
		}
		if res[2] == 0 || attempt == 3 {
			if given > 0 { // not used: give the slot back if nobody reserved after it
				s.meter(ctx, rule, now, out.TotalEvery, 0, -1, 0, 0, given+every, given)
			}
			return time.Time{}, fromUS(res[0]), false, nil
		}
		// The key's own next slot is after the reserved one: give it back, reserve from there.
		s.meter(ctx, rule, now, out.TotalEvery, 0, -1, 0, 0, given+every, given)
		floor = res[2]
	}
}

// Renew extends the leases of claims owner still holds to now+lease, in one round trip per
// 1000 keys (now: Redis's clock when zero). A drainer renews the keys it is delivering (or
// about to), so a short lease covers a slow sink while a dead drainer's keys come back soon.
func (s Claims) Renew(ctx context.Context, rule, owner string, now time.Time, lease time.Duration, held []Held) (Renewed, error) {
	p, n := s.layout(ctx, rule)
	out := Renewed{Held: make([]bool, len(held))}
	byPart := map[int][]int{}
	for j, h := range held {
		i := PartitionOf(h.Key, p)
		byPart[i] = append(byPart[i], j)
	}
	if len(held) == 0 {
		byPart[0] = nil // still read Redis's clock
	}
	if err := s.renew(ctx, rule, owner, now, lease, held, byPart, &out); err != nil {
		return out, err
	}
	if n > 1 {
		// A key claimed before the rule's partition count changed is held in its old
		// partition: look for the ones not renewed in the others (only then, one round trip).
		again := map[int][]int{}
		for j, ok := range out.Held {
			if ok {
				continue
			}
			for i := range n {
				if i != PartitionOf(held[j].Key, p) {
					again[i] = append(again[i], j)
				}
			}
		}
		if len(again) > 0 {
			if err := s.renew(ctx, rule, owner, now, lease, held, again, &out); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// renew runs renew.lua for held[j], j in byPart[i], in partition i, in one pipelined round
// trip, setting out.Held[j] for those renewed (never clearing it) and out.Now.
func (s *store) renew(ctx context.Context, rule, owner string, now time.Time, lease time.Duration, held []Held, byPart map[int][]int, out *Renewed) error {
	var calls []*call
	var batches [][]int
	for i, js := range byPart {
		k := s.part(rule, i)
		for first := true; first || len(js) > 0; first = false {
			n := min(len(js), maxBatch)
			args := make([]any, 0, 3+2*n)
			args = append(args, usOrZero(now), lease.Microseconds(), owner)
			for _, j := range js[:n] {
				args = append(args, held[j].Key, held[j].Fence)
			}
			calls = append(calls, &call{script: renewScript, keys: []string{k.lease, k.held}, args: args})
			batches = append(batches, js[:n])
			js = js[n:]
		}
	}
	s.runAll(ctx, calls)
	for x, c := range calls {
		res, err := c.cmd.Int64Slice()
		if err == nil && len(res) != len(batches[x])+1 {
			err = errUnexpected(len(res))
		}
		if err != nil {
			return fmt.Errorf("queue: renew leases of rule %q: %w", rule, err)
		}
		if t := fromUS(res[0]); t.After(out.Now) {
			out.Now = t
		}
		for y, j := range batches[x] {
			if res[y+1] == 1 {
				out.Held[j] = true
			}
		}
	}
	return nil
}
