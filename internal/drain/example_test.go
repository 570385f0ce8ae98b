package drain_test

import (
	"fmt"
	"time"

	"github.com/sluice-io/sluice/internal/drain"
	"github.com/sluice-io/sluice/internal/rules"
)

// A rule's outflow becomes the spacing the scheduler keeps between two messages of a key,
// and total_outflow the spacing between two messages of the whole rule.
func ExampleRulePolicy() {
	r := &rules.Rule{Name: "orders-per-merchant", Queue: &rules.Queue{
		Capacity:     100,
		Outflow:      rules.Rate{Requests: 10, Interval: time.Second},
		TotalOutflow: rules.Rate{Requests: 200, Interval: time.Second},
	}}
	p := drain.RulePolicy(r)
	fmt.Println(p.Outflow.Every, p.Outflow.TotalEvery, p.Paused)
	// Output: 100ms 5ms false
}
