package status

import (
	"context"
	"errors"
	"fmt"
	"time"

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
			if err := l.Queues.Delete(ctx, st.Rule, st.seq); err != nil {
				if errors.Is(err, queue.ErrGone) { // taken by a drainer, or another cancel, meanwhile
					st.State = Delivering
					return Status{}, &NotCancellable{Status: st}
				}
				return Status{}, err
			}
			if l.Scheduler != nil {
				l.Scheduler.Uncount(ctx, st.Rule, st.Key) // the depth estimate; a miss heals when the key empties
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
		if err != nil {
			return Status{}, err
		}
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
