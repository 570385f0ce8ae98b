package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/queue"
)

// ErrNotScheduled: Find did not see the message in the retry stream.
var ErrNotScheduled = errors.New("retry: message not in the retry stream")

// Scheduled is a message Find saw in the retry stream.
type Scheduled struct {
	queue.Message
	Kind     string    // KindPark, KindRetry or KindSchedule
	RetryAt  time.Time // when its schedule fires (zero once fired)
	Fired    bool      // its schedule fired: the re-admitter is putting it back into its queue
	StoredAt time.Time // when it entered the retry stream
}

// findMaxRead bounds the fired schedules one Find reads.
const findMaxRead = 1000

// Find looks for message id of rule in the retry stream: a pending park or delivery-retry
// schedule (one lookup each, by the id's own subject), else a fired schedule the
// re-admitter has not handled yet (the rule's ready subject, read in order — it holds only
// what fired and waits). ErrNotFound when it holds none of them.
func (s *Store) Find(ctx context.Context, rule, id string) (Scheduled, error) {
	st, err := s.handle(ctx)
	if err != nil {
		return Scheduled{}, err
	}
	for _, kind := range []string{KindPark, KindRetry, KindSchedule} {
		raw, err := st.GetLastMsgForSubject(ctx, s.ScheduleSubject(kind, rule, id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return Scheduled{}, fmt.Errorf("retry: find %s: %w", id, err)
		}
		m, err := decode(raw.Header, raw.Data)
		if err != nil || m.ID != id {
			continue
		}
		meta := decodeMeta(raw.Header)
		return Scheduled{Message: m, Kind: meta.Kind, RetryAt: meta.RetryAt, StoredAt: raw.Time}, nil
	}
	// Bounded as a key's queue is (status.Locator.MaxRead): a made-up id must not read a
	// backlog of fired schedules to its end. One past the bound is reported as not here.
	f, _, err := queue.FindInSubjectLimited(ctx, s.js.Conn(), s.cfg.APIPrefix, s.cfg.Stream, s.ReadySubject(rule), id,
		queue.FindLimits{MaxRead: findMaxRead})
	if errors.Is(err, queue.ErrNotQueued) || errors.Is(err, queue.ErrReadLimit) {
		return Scheduled{}, fmt.Errorf("%w: %s", ErrNotScheduled, id)
	}
	if err != nil {
		return Scheduled{}, err
	}
	return Scheduled{Message: f.Message, Kind: decodeMeta(f.Header).Kind, Fired: true, StoredAt: f.StoredAt}, nil
}

// Cancel removes the pending schedule (park or delivery retry) of message id of rule, so it
// is never re-admitted. It reports whether there was one. A schedule that already fired is
// the re-admitter's and is not removed.
func (s *Store) Cancel(ctx context.Context, rule, id string) (bool, error) {
	st, err := s.handle(ctx)
	if err != nil {
		return false, err
	}
	removed := false
	for _, kind := range []string{KindPark, KindRetry, KindSchedule} {
		subj := s.ScheduleSubject(kind, rule, id)
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return removed, fmt.Errorf("retry: cancel %s: %w", id, err)
		}
		if info.State.Subjects[subj] == 0 {
			continue
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return removed, fmt.Errorf("retry: cancel %s: %w", id, err)
		}
		removed = true
	}
	return removed, nil
}
