package delivery_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/rules"
)

// TestVerdictLabels: a verdict's String is the outcome label of sluice_deliveries_total,
// which dashboards and alerts select on.
func TestVerdictLabels(t *testing.T) {
	for v, want := range map[delivery.Verdict]string{delivery.Delivered: "delivered", delivery.Retry: "retried", delivery.Dead: "dead", delivery.Verdict(9): "unknown"} {
		if got := v.String(); got != want {
			t.Errorf("%d: %q, want %q", int(v), got, want)
		}
	}
}

// TestOutcomes: each constructor sets its verdict and keeps what the drainer acts on
// (the wait a sink asked for, the error stored as last_error or the dead-letter reason).
func TestOutcomes(t *testing.T) {
	if o := delivery.OutcomeDelivered(); o != (delivery.Outcome{Verdict: delivery.Delivered}) {
		t.Errorf("delivered: %+v", o)
	}
	if o := delivery.OutcomeRetry(7*time.Second, "sink: 429"); o.Verdict != delivery.Retry || o.RetryAfter != 7*time.Second || o.Err != "sink: 429" {
		t.Errorf("retry: %+v", o)
	}
	if o := delivery.OutcomeDead("sink: 400"); o.Verdict != delivery.Dead || o.Err != "sink: 400" || o.RetryAfter != 0 {
		t.Errorf("dead: %+v", o)
	}
}

// TestRulePolicy: a queue rule is drained at its outflow (per key) and total_outflow (the
// whole rule); a rule without a queue section is never drained.
func TestRulePolicy(t *testing.T) {
	r := &rules.Rule{Name: "orders", Queue: &rules.Queue{Capacity: 10, Outflow: rules.Rate{Requests: 10, Interval: time.Second}}}
	if p := delivery.RulePolicy(r); p.Paused || p.Outflow.Every != 100*time.Millisecond || p.Outflow.TotalEvery != 0 {
		t.Errorf("outflow only: %+v", p)
	}
	r.Queue.TotalOutflow = rules.Rate{Requests: 200, Interval: time.Second}
	if p := delivery.RulePolicy(r); p.Outflow.TotalEvery != 5*time.Millisecond {
		t.Errorf("with total_outflow: %+v", p)
	}
	if p := delivery.RulePolicy(&rules.Rule{Name: "check-only"}); !p.Paused {
		t.Errorf("no queue: %+v, want paused", p)
	}
}
