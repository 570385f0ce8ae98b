package status

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// States a message can be in.
const (
	Scheduled  = "scheduled"
	Queued     = "queued"
	Parked     = "parked"
	Delivering = "delivering"
	Delivered  = "delivered"
	Retrying   = "retrying"
	Dead       = "dead"
	// Cancelled: taken back by a cancel. Known only with delivered records on (-status-keep),
	// for as long as they are kept; without them a cancelled message is "no longer tracked".
	Cancelled = "cancelled"
)

// ErrNeverSeen: the id is not one sluice issued (or its rule does not exist).
var ErrNeverSeen = errors.New("status: no such message")

// ErrNotTracked is wrapped by a *Gone: the message left sluice (delivered, or purged).
var ErrNotTracked = errors.New("status: message no longer tracked")

// Gone is what is known of a message that is no longer anywhere: what its id says.
type Gone struct {
	ID       string
	Rule     string    // "" for an id of an earlier version
	Key      string    // ""  for an id of an earlier version
	IssuedAt time.Time // when the id was issued (its uuid v7 time)
	Legacy   bool      // an id of an earlier version: only its dead letter can be found
	// Unread: the key's queue holds more messages than one lookup reads (Locator.MaxRead);
	// the message could be among those not read (stored again long after its id was
	// issued, behind that many others of its key).
	Unread bool
}

func (g *Gone) Error() string { return fmt.Sprintf("status: message %s no longer tracked", g.ID) }

// Unwrap makes errors.Is(err, ErrNotTracked) hold.
func (g *Gone) Unwrap() error { return ErrNotTracked }

// Status is where one message is.
type Status struct {
	ID        string
	Domain    string
	Rule      string
	Key       string
	State     string
	Attempts  int // delivery attempts made
	CreatedAt time.Time
	UpdatedAt time.Time // when it entered the place it is in
	LastError string
	RetryAt   time.Time // parked or retrying from the retry stream: when it goes back to its queue
	Position  int       // queued: messages ahead of it in its key's queue

	seq   uint64 // in its key's queue: its stream sequence (Cancel)
	fired bool   // in the retry stream: its schedule fired (Cancel)
}

// Locator finds messages. Rules and Queues are required; a nil Scheduler reads every
// message in a queue as queued, a nil Parking or Dead is not looked in.
type Locator struct {
	Rules     func() *rules.Set
	Queues    *queue.Queues
	Scheduler *queue.Scheduler
	Parking   *retry.Store
	Dead      *retry.DeadLetters
	// Delivered, when set, holds the opt-in records of delivered messages.
	Delivered *DeliveredRecords
	// MaxRead bounds the messages of a key's queue one look reads (a lookup looks twice at
	// most); default DefaultMaxRead. Without a bound, a lookup of a made-up id would read
	// the whole queue of its key — a cheap request costing the stores a lot, which slowed
	// admission for everyone.
	MaxRead int
	// Skew is how far the clocks of an ingress (which issues ids) and of NATS (which stamps
	// what it stores) may disagree; default ClockSkew. A key's queue is read from the id's
	// issue time less Skew, so the messages its key stored within Skew before it are read
	// too: MaxRead / Skew is the submission rate into one key up to which a queued
	// message is always found.
	Skew time.Duration

	read atomic.Int64 // messages read in keys' queues, all lookups (MessagesRead)

	beforeDelete func() // a test seam: runs just before Cancel deletes a queued message
}

// DefaultMaxRead is Locator.MaxRead's default: a message is found among the first few
// messages its key stored after its id was issued, so only a message stored again later
// (re-admitted, replayed) behind a thousand others of its key is out of reach.
const DefaultMaxRead = 1000

// ClockSkew is Locator.Skew's default: hosts kept in time by NTP agree within
// milliseconds. A message stored earlier than that (clocks further apart) is still found
// when its key holds fewer than MaxRead messages ahead of it.
const ClockSkew = 2 * time.Second

// MessagesRead is how many messages of keys' queues lookups have read so far.
func (l *Locator) MessagesRead() int64 { return l.read.Load() }

// Get returns where message id is: ErrNeverSeen for an id that is not sluice's, a *Gone
// (errors.Is ErrNotTracked) for one that has left; other errors are the stores' (NATS or
// Redis unreachable).
//
// With delivered records on, a message found nowhere is looked for among them for up to
// RecordGrace more before the answer is a *Gone (see RecordGrace).
func (l *Locator) Get(ctx context.Context, id string) (Status, error) {
	return l.get(ctx, id, RecordGrace)
}

// GetNow is Get without waiting for a delivered record on its way: for a caller to which
// "no longer tracked" is a cue to act on rather than an answer to give (an idempotency
// key's repeat, whose owner re-admitted under its own id is recognised by the stream).
func (l *Locator) GetNow(ctx context.Context, id string) (Status, error) {
	return l.get(ctx, id, 0)
}

func (l *Locator) get(ctx context.Context, id string, grace time.Duration) (Status, error) {
	ref, ok := queue.ParseID(id)
	if !ok {
		return l.legacy(ctx, id)
	}
	r := l.rule(ref.RuleToken)
	if r == nil {
		return Status{}, fmt.Errorf("%w: %s names no queue rule", ErrNeverSeen, id)
	}
	issued := time.Unix(ref.UUID.Time().UnixTime()).UTC()
	began := time.Now()
	unread := false
	skew := l.Skew
	if skew <= 0 {
		skew = ClockSkew
	}
	// A made-up id cannot send the lookup further than MaxRead messages of its key's queue:
	// the queue is read from the id's issue time on (and before it, within the same bound).
	if st, err := l.inQueue(ctx, r, ref.Key, id, issued.Add(-skew)); errors.Is(err, queue.ErrReadLimit) {
		unread = true
	} else if !errors.Is(err, queue.ErrNotQueued) {
		return st, err
	}
	if l.Parking != nil {
		sc, err := l.Parking.Find(ctx, r.Name, id)
		switch {
		case err == nil:
			st := l.base(r, sc.Message)
			st.State, st.UpdatedAt, st.RetryAt, st.fired = Parked, sc.StoredAt, sc.RetryAt, sc.Fired
			switch sc.Kind {
			case retry.KindRetry:
				st.State = Retrying
			case retry.KindSchedule:
				st.State = Scheduled
			}
			return st, nil
		case !errors.Is(err, retry.ErrNotScheduled):
			return Status{}, err
		}
	}
	if st, err := l.dead(ctx, r, id); !errors.Is(err, retry.ErrNotFound) {
		return st, err
	}
	// Last, the queue again: a message re-admitted or replayed while we looked elsewhere,
	// so stored since this lookup began.
	if st, err := l.inQueue(ctx, r, ref.Key, id, began.Add(-skew)); errors.Is(err, queue.ErrReadLimit) {
		unread = true
	} else if !errors.Is(err, queue.ErrNotQueued) {
		return st, err
	}
	if l.Delivered != nil {
		rec, ok, err := l.deliveredRecord(ctx, id, grace)
		if err != nil {
			return Status{}, err
		}
		if ok { // delivered, or cancelled
			return Status{ID: id, Domain: r.Domain, Rule: r.Name, Key: ref.Key, State: rec.state, Attempts: rec.attempts,
				CreatedAt: issued, UpdatedAt: rec.at}, nil
		}
	}
	return Status{}, &Gone{ID: id, Rule: r.Name, Key: ref.Key, IssuedAt: issued, Unread: unread}
}

// RecordGrace is how long a lookup that found a message nowhere waits for its delivered
// record before it answers "no longer tracked". The drainer hands the record to an
// asynchronous writer just before it deletes the delivered message from its queue, so a
// lookup landing between the two finds the message in neither place for the few
// milliseconds the record takes to be stored.
const RecordGrace = 100 * time.Millisecond

// deliveredRecord reads id's delivered record, and reads it again every 20 ms for up to
// grace while there is none. A caller gone during the wait gets the first read's answer
// (none), not an error: the wait is a courtesy.
func (l *Locator) deliveredRecord(ctx context.Context, id string, grace time.Duration) (rec record, ok bool, err error) {
	deadline := time.Now().Add(grace)
	for {
		rec, ok, err = l.Delivered.record(ctx, id)
		if ok || err != nil || !time.Now().Before(deadline) {
			return rec, ok, err
		}
		t := time.NewTimer(min(20*time.Millisecond, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return record{}, false, nil
		case <-t.C:
		}
	}
}

func (l *Locator) rule(token string) *rules.Rule {
	set := l.Rules()
	if r := set.Rule(token); r != nil && r.HasQueue() && queue.RuleToken(r.Name) == token {
		return r
	}
	for _, r := range set.QueueRules() {
		if queue.RuleToken(r.Name) == token {
			return r
		}
	}
	return nil
}

func (l *Locator) base(r *rules.Rule, m queue.Message) Status {
	return Status{ID: m.ID, Domain: r.Domain, Rule: r.Name, Key: m.Key, Attempts: m.Attempt,
		CreatedAt: m.CreatedAt, LastError: m.LastError}
}

func (l *Locator) inQueue(ctx context.Context, r *rules.Rule, key, id string, after time.Time) (Status, error) {
	maxRead := l.MaxRead
	if maxRead <= 0 {
		maxRead = DefaultMaxRead
	}
	f, read, err := l.Queues.FindLimited(ctx, r.Name, key, id, queue.FindLimits{After: after, MaxRead: maxRead})
	l.read.Add(int64(read))
	if err != nil {
		return Status{}, err
	}
	st := l.base(r, f.Message)
	st.Key, st.State, st.UpdatedAt, st.Position, st.seq = key, Queued, f.StoredAt, f.Position, f.Seq
	if f.Position > 0 || l.Scheduler == nil {
		return st, nil
	}
	ks, err := l.Scheduler.Depths.KeyState(ctx, r.Name, key)
	if err != nil {
		return st, nil // Redis unreachable: the stream still says it is queued
	}
	if ks.Retry != nil && ks.Retry.MsgID == id {
		st.State, st.Attempts, st.LastError = Retrying, max(st.Attempts, ks.Retry.Attempts), ks.Retry.LastError
	}
	if ks.Held {
		st.State = Delivering
	}
	return st, nil
}

func (l *Locator) dead(ctx context.Context, r *rules.Rule, id string) (Status, error) {
	if l.Dead == nil {
		return Status{}, retry.ErrNotFound
	}
	dl, err := l.Dead.Get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	if r == nil {
		r = l.Rules().Rule(dl.Message.Rule)
	}
	st := Status{ID: id, Rule: dl.Message.Rule, Key: dl.Message.Key, Attempts: dl.Message.Attempt,
		CreatedAt: dl.Message.CreatedAt, LastError: dl.Reason}
	if r != nil {
		st.Domain = r.Domain
	}
	st.State, st.UpdatedAt = Dead, dl.DeadAt
	return st, nil
}

// legacy answers an id of an earlier version (a bare uuid): it names no key, so only its
// dead letter can be found.
func (l *Locator) legacy(ctx context.Context, id string) (Status, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return Status{}, fmt.Errorf("%w: %q is not a message id", ErrNeverSeen, id)
	}
	st, err := l.dead(ctx, nil, id)
	if errors.Is(err, retry.ErrNotFound) {
		g := &Gone{ID: id, Legacy: true}
		if u.Version() == 7 {
			g.IssuedAt = time.Unix(u.Time().UnixTime()).UTC()
		}
		return Status{}, g
	}
	return st, err
}
