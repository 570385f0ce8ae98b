package sink

import (
	"context"

	"github.com/sluice-io/sluice/internal/delivery"
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
	HTTP delivery.Sink // usually *HTTP
	NATS delivery.Sink // usually *NATS
}

var _ delivery.Sink = Multi{}

// Deliver delegates to the sink the rule names.
func (mu Multi) Deliver(ctx context.Context, rule *rules.Rule, m queue.Message) delivery.Outcome {
	switch {
	case rule == nil:
		return delivery.OutcomeDead("sink: no rule")
	case rule.Sink.URL != "":
		if mu.HTTP == nil {
			return delivery.OutcomeDead("sink: http sinks are not configured in this drainer")
		}
		return mu.HTTP.Deliver(ctx, rule, m)
	case rule.Sink.NATSSubject != "":
		if mu.NATS == nil {
			return delivery.OutcomeDead("sink: nats sinks are not configured in this drainer")
		}
		return mu.NATS.Deliver(ctx, rule, m)
	default:
		return delivery.OutcomeDead("sink: rule " + rule.Name + " has no sink")
	}
}
