package delivery

import (
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// Policy is how a rule is drained right now: the rules file's values, or a live override.
type Policy struct {
	Outflow queue.Outflow
	Paused  bool // claim nothing; queued messages wait
}

// RulePolicy is a rule's own Policy: its outflow and total_outflow (the drainer's default,
// when no override applies). A rule without a queue section is never drained: Paused.
func RulePolicy(r *rules.Rule) Policy {
	if r.Queue == nil {
		return Policy{Paused: true}
	}
	p := Policy{Outflow: queue.Outflow{Every: r.Queue.Outflow.Every()}}
	if !r.Queue.TotalOutflow.Zero() {
		p.Outflow.TotalEvery = r.Queue.TotalOutflow.Every()
	}
	return p
}
