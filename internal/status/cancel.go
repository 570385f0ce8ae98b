package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/queue"
)

// ErrNotCancellable is wrapped by Cancel's error for a message that cannot be taken back:
// being delivered, delivered, dead, or moving back into its queue from the retry stream.
var ErrNotCancellable = errors.New("status: message cannot be cancelled")

// NotCancellable says why: the message's state (Status.State) when Cancel looked.
type NotCancellable struct{ Status Status }

func (e *NotCancellable) Error() string {
	return fmt.Sprintf("status: message %s is %s: it cannot be cancelled", e.Status.ID, e.Status.State)
}

// Unwrap makes errors.Is(err, ErrNotCancellable) hold.
func (e *NotCancellable) Unwrap() error { return ErrNotCancellable }

// ErrOutcomeUnknown is wrapped by Cancel's error when the delete was sent and no answer
// says whether it was carried out (the store timed out or went away, and could not be
// read again): the message may be cancelled. Never answer it as "nothing happened".
var ErrOutcomeUnknown = errors.New("status: cancel sent, outcome unknown")

// recordCancelled files the cancelled record of st with delivered records on. The message
// is removed whatever becomes of the record: one that cannot be written within 2 s leaves
// the status at "no longer tracked", as without records — not worth failing a done cancel.
func (l *Locator) recordCancelled(ctx context.Context, st Status) {
	if l.Delivered == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = l.Delivered.RecordCancelled(ctx, st.ID, st.Attempts)
}

// Cancel removes message id if it has not been delivered yet — queued (in its key's queue,
// not being delivered), scheduled, parked or waiting for a delivery retry (in the retry
// stream) — and
// returns its status as it was; with delivered records on, its status is "cancelled" from
// then on (and a repeated Cancel answers the same). A message being delivered, delivered (on record), dead, or
// fired from the retry stream and moving back into its queue is a *NotCancellable; one that
// has left sluice with no record is a *Gone, as for Get.
//
// The removal is JetStream's own atomic delete of that message: if a drainer takes the
// message as its key's head in the moment between the look and the delete, its delivery
// goes ahead (the drainer's delete then finds it gone), so a head may still reach the sink
// once after Cancel answered.
func (l *Locator) Cancel(ctx context.Context, id string) (Status, error) {
	st, err := l.Get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	switch st.State {
	case Queued, Retrying:
		if st.seq != 0 {
			if hook := l.beforeDelete; hook != nil {
				hook()
			}
			if err := l.Queues.Delete(ctx, st.Rule, st.seq); err != nil {
				if errors.Is(err, queue.ErrGone) { // taken by a drainer, or another cancel, meanwhile
					st.State = Delivering
					return Status{}, &NotCancellable{Status: st}
				}
				return Status{}, l.afterFailedDelete(ctx, id, st, err)
			}
			if l.Scheduler != nil {
				l.Scheduler.Depths.Uncount(ctx, st.Rule, st.Key) // the depth estimate; a miss heals when the key empties
			}
			l.recordCancelled(ctx, st)
			return st, nil
		}
		fallthrough
	case Parked, Scheduled:
		if st.fired {
			return Status{}, &NotCancellable{Status: st}
		}
		ok, err := l.Parking.Cancel(ctx, st.Rule, id)
		if err != nil && !ok {
			return Status{}, err
		}
		// ok with an error: the message's schedule was removed, and looking at the other
		// kinds of schedule (where it is not) failed. It is cancelled.
		if !ok { // fired meanwhile
			return Status{}, &NotCancellable{Status: st}
		}
		l.recordCancelled(ctx, st)
		return st, nil
	case Cancelled:
		// Cancelled before (a retried cancel whose first answer was lost): it is what the
		// caller asked for, so the answer is the same, not a conflict.
		return st, nil
	default:
		return Status{}, &NotCancellable{Status: st}
	}
}

// MayHaveActed reports whether a request to the store that failed with err may still
// have been carried out: it timed out, or its context ended, once sent. Other failures —
// the store's own refusal, no connection (sluice's NATS clients keep no reconnect buffer,
// so nothing is sent while disconnected) — did nothing.
func MayHaveActed(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// afterFailedDelete is Cancel's answer when deleting queued message st failed with err: a
// delete that timed out may still have been carried out, so the message is looked for
// again. Still at its place: nothing was done (err). Taken by a drainer: not
// cancellable. Anything else — gone (cancelled by this delete, or delivered meanwhile
// without a record), or the store unreadable — ErrOutcomeUnknown.
func (l *Locator) afterFailedDelete(ctx context.Context, id string, st Status, err error) error {
	if !MayHaveActed(err) {
		return err // refused, or never sent (the NATS client keeps no reconnect buffer)
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	now, gerr := l.GetNow(lctx, id)
	switch {
	case gerr == nil && (now.State == Queued || now.State == Retrying) && now.seq == st.seq:
		return err
	case gerr == nil && (now.State == Delivering || now.State == Delivered || now.State == Dead):
		return &NotCancellable{Status: now}
	case gerr != nil:
		return fmt.Errorf("%w: %w (and looking again: %w)", ErrOutcomeUnknown, err, gerr)
	}
	return fmt.Errorf("%w: %w (the message is now %s)", ErrOutcomeUnknown, err, now.State)
}
