// Package retryrules connects the public retry package to sluice's own rules and drainer:
// retry speaks in its own types (retry.Rule, rule names) so that a program outside this
// module can use it; sluice's processes hold *rules.Rule values and a drain.Drainer that
// wants delivery.Retrier and delivery.DeadLetters. These adapters are the only place the two
// meet, so neither package imports the other's model.
package retryrules

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

// Rule is what the retry queue needs of r: its name, park.max_age and ordering.
func Rule(r *rules.Rule) retry.Rule {
	return retry.Rule{Name: r.Name, ParkMaxAge: r.Park.MaxAge, Relaxed: r.Ordering == rules.OrderingRelaxed}
}

// Lookup is a retry.RuleLookup over the rules in force (rule looks a rule up by name, nil
// when there is none — e.g. (*rules.Set).Rule of the watcher's current set).
func Lookup(rule func(name string) *rules.Rule) retry.RuleLookup {
	return func(name string) (retry.Rule, bool) {
		r := rule(name)
		if r == nil {
			return retry.Rule{}, false
		}
		return Rule(r), true
	}
}

// Admit is a retry.AdmitFunc that hands admit the rule in force by the name of the rule it
// is given. A rule removed between the re-admitter's look-up and this one is an error: the
// fired message is tried again, and then found without a rule and made dead.
func Admit(rule func(name string) *rules.Rule, admit func(ctx context.Context, r *rules.Rule, m queue.Message, msgID string) (retry.AdmitResult, error)) retry.AdmitFunc {
	return func(ctx context.Context, rr retry.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		r := rule(rr.Name)
		if r == nil {
			return retry.AdmitResult{}, fmt.Errorf("retryrules: rule %q is no longer in force", rr.Name)
		}
		return admit(ctx, r, m, msgID)
	}
}

// Retrier is s as the drainer's delivery.Retrier; nil for a nil s (no retry stream).
func Retrier(s *retry.Store) delivery.Retrier {
	if s == nil {
		return nil
	}
	return retrier{s}
}

type retrier struct{ s *retry.Store }

func (r retrier) ScheduleRetry(ctx context.Context, rule *rules.Rule, m queue.Message, at time.Time) error {
	return r.s.ScheduleRetry(ctx, name(rule), m, at)
}

// DeadLetters is d as the drainer's delivery.DeadLetters; nil for a nil d.
func DeadLetters(d *retry.DeadLetters) delivery.DeadLetters {
	if d == nil {
		return nil
	}
	return deadLetters{d}
}

type deadLetters struct{ d *retry.DeadLetters }

func (d deadLetters) Dead(ctx context.Context, rule *rules.Rule, m queue.Message, reason string) error {
	return d.d.Dead(ctx, name(rule), m, reason)
}

// name is the rule's name, "" for a nil rule (a rule that was removed: m.Rule names it).
func name(r *rules.Rule) string {
	if r == nil {
		return ""
	}
	return r.Name
}
