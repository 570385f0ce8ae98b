package sink

import (
	"context"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
)

// Multi picks the sink a rule names: HTTP when rule.Sink.URL is set, NATS when
// rule.Sink.NATSSubject is. A rule whose kind of sink is not configured here (or that
// has none) is a permanent failure: the message goes to the dead letters with a reason
// saying so, instead of retrying something that cannot succeed.
//
// Multi is a plain struct: fill the sinks this process can use. Safe for concurrent use
// when its sinks are.
type Multi struct {
	HTTP drain.Sink // usually *HTTP
	NATS drain.Sink // usually *NATS
}

var _ drain.Sink = Multi{}

// Deliver delegates to the sink the rule names.
func (mu Multi) Deliver(ctx context.Context, rule *rules.Rule, m queue.Message) drain.Outcome {
	switch {
	case rule == nil:
		return drain.OutcomeDead("sink: no rule")
	case rule.Sink.URL != "":
		if mu.HTTP == nil {
			return drain.OutcomeDead("sink: http sinks are not configured in this drainer")
		}
		return mu.HTTP.Deliver(ctx, rule, m)
	case rule.Sink.NATSSubject != "":
		if mu.NATS == nil {
			return drain.OutcomeDead("sink: nats sinks are not configured in this drainer")
		}
		return mu.NATS.Deliver(ctx, rule, m)
	default:
		return drain.OutcomeDead("sink: rule " + rule.Name + " has no sink")
	}
}
