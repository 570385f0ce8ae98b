// Package retire deals with what a queue rule leaves behind when it is removed from the
// rules: the messages waiting in its key's queues and in the retry stream become dead
// letters with reason "rule removed" (replayable for 14 days, should the rule come back),
// counted and logged; its stream is deleted, so it stops reserving room in the JetStream
// store; its live override is deleted, so that a rule added again under the same name
// starts from its rules file — an old `paused` does not come back with it — and its
// per-key scheduling state in Redis is dropped.
//
// The ingress calls Rules on every rules reload for the queue rules that the reload
// removed (a rule that became check-only counts as removed). Every ingress that sees the
// reload does it; the steps are idempotent (a dead letter of one id is stored once, a
// message already deleted is skipped), so two at once leave one dead letter per message.
// A rule removed while no ingress ran is not seen removed: its stream is reported at start
// (Orphans), not emptied, because a process started with the wrong rules file must not
// turn every queue into dead letters.
package retire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// Retirer retires removed rules. Queues, Dead and Logger are required; a nil Parking,
// Overrides or Scheduler skips its step.
type Retirer struct {
	Queues    *queue.Queues
	Parking   *retry.Store
	Dead      *retry.DeadLetters
	Overrides *overrides.Store
	Scheduler *queue.Scheduler
	Logger    *slog.Logger

	moved *prometheus.CounterVec
}

// Register registers sluice_rule_removed_messages_total{rule,from} on reg.
func (r *Retirer) Register(reg prometheus.Registerer) {
	r.moved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rule_removed_messages_total",
		Help: "Messages made dead letters (reason \"rule removed\") because their queue rule was removed from the rules, by where they waited (queue, retry).",
	}, []string{"rule", "from"})
	if reg != nil {
		reg.MustRegister(r.moved)
	}
}

// Result is what retiring one rule did.
type Result struct {
	Queued int // messages of its key's queues made dead letters
	Parked int // messages of the retry stream (parked, scheduled, delivery retries) made dead letters
}

// Removed returns the queue rules of before that after has not (as queue rules).
func Removed(before, after *rules.Set) []string {
	if before == nil || after == nil {
		return nil
	}
	var out []string
	for _, r := range before.QueueRules() {
		if a := after.Rule(r.Name); a == nil || !a.HasQueue() {
			out = append(out, r.Name)
		}
	}
	return out
}

// Rule retires the removed queue rule name. It logs what it did at info, and returns the
// first error met (the steps before it are done; calling it again resumes).
func (r *Retirer) Rule(ctx context.Context, name string) (Result, error) {
	var res Result
	log := r.Logger.With("rule", name)
	var err error
	if res.Queued, err = r.queued(ctx, name); err != nil {
		return res, err
	}
	if r.Parking != nil {
		if res.Parked, err = r.Parking.DeadRule(ctx, name, r.Dead); err != nil {
			return res, err
		}
	}
	if r.moved != nil {
		r.moved.WithLabelValues(name, "queue").Add(float64(res.Queued))
		r.moved.WithLabelValues(name, "retry").Add(float64(res.Parked))
	}
	if r.Overrides != nil {
		if err := r.Overrides.Reset(ctx, name); err != nil {
			return res, err
		}
	}
	if r.Scheduler != nil {
		if err := r.Scheduler.DeleteRule(ctx, name); err != nil {
			return res, err
		}
	}
	log.Info("rule removed: its waiting messages are dead letters (reason \"rule removed\"; replay them if the rule comes back), its override and stream deleted",
		"queued", res.Queued, "parked", res.Parked)
	return res, nil
}

// queued dead-letters every message of rule's stream, key by key in order, then deletes
// the stream. A message that arrives between the last sweep and the delete (an ingress
// that has not reloaded yet) is swept again: the stream is deleted only once a sweep found
// it empty.
func (r *Retirer) queued(ctx context.Context, rule string) (int, error) {
	n := 0
	for sweep := 0; ; sweep++ {
		keys, err := r.Queues.Keys(ctx, rule)
		if errors.Is(err, queue.ErrNoQueue) {
			return n, nil // no stream: nothing waited, or retired already
		}
		if err != nil {
			return n, err
		}
		if len(keys) == 0 {
			st, err := r.Queues.Stats(ctx, rule)
			if err != nil && !errors.Is(err, queue.ErrNoQueue) {
				return n, err
			}
			if st.Msgs == 0 || sweep >= 5 {
				return n, r.Queues.DeleteQueue(ctx, rule)
			}
			continue
		}
		for key := range keys {
			for {
				p, err := r.Queues.Pop(ctx, rule, key)
				if errors.Is(err, queue.ErrEmpty) {
					break
				}
				if err != nil && !errors.Is(err, queue.ErrBadMessage) {
					return n, err
				}
				// Dead letter first, then delete: a crash in between leaves the message in both
				// places, never in neither. Counted only by the process whose delete took it
				// (another ingress retiring the same rule stored the same dead letter, once).
				if p.ID != "" {
					m := p.Message
					m.Rule = rule
					if err := r.Dead.Dead(ctx, "", m, retry.ReasonRuleRemoved); err != nil {
						return n, err
					}
				} else {
					r.Logger.Warn("rule removed: a message that is not sluice's deleted from its queue", "rule", rule, "key", key, "seq", p.Seq)
				}
				err = r.Queues.Delete(ctx, rule, p.Seq)
				switch {
				case err == nil && p.ID != "":
					n++
				case err != nil && !errors.Is(err, queue.ErrGone):
					return n, err
				}
			}
		}
	}
}

// Orphans returns the queue streams (by name, with their messages) that belong to no queue
// rule of set: rules removed while no ingress ran to see it. Streams are recognised by
// their name's prefix (queue.Config.StreamPrefix).
func Orphans(ctx context.Context, js jetstream.JetStream, q *queue.Queues, set *rules.Set) (map[string]uint64, error) {
	ours := map[string]bool{}
	for _, r := range set.QueueRules() {
		ours[q.StreamName(r.Name)] = true
	}
	prefix := strings.TrimSuffix(q.StreamName("x"), "x")
	out := map[string]uint64{}
	lister := js.ListStreams(ctx)
	for info := range lister.Info() {
		name := info.Config.Name
		if strings.HasPrefix(name, prefix) && !ours[name] {
			out[name] = info.State.Msgs
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("retire: list streams: %w", err)
	}
	return out, nil
}
