package retryrules

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/queue"
	"github.com/sluice-io/sluice/retry"
)

func TestRuleAndLookup(t *testing.T) {
	set, err := rules.Parse("r.yaml", []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: strict
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}
    overflow: park
    park: {max_age: 2h}
    sink: {url: "http://127.0.0.1:1/"}
  - key: shop
    name: relaxed
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}
    ordering: relaxed
    sink: {url: "http://127.0.0.1:1/"}
`))
	if err != nil {
		t.Fatal(err)
	}
	lookup := Lookup(set.Rule)
	if r, ok := lookup("strict"); !ok || r != (retry.Rule{Name: "strict", ParkMaxAge: 2 * time.Hour}) {
		t.Errorf("strict = %+v, %v", r, ok)
	}
	if r, ok := lookup("relaxed"); !ok || r != (retry.Rule{Name: "relaxed", ParkMaxAge: rules.DefaultParkMaxAge, Relaxed: true}) {
		t.Errorf("relaxed = %+v, %v", r, ok)
	}
	if _, ok := lookup("gone"); ok {
		t.Error("a rule that is not in force was found")
	}

	var got *rules.Rule
	admit := Admit(set.Rule, func(ctx context.Context, r *rules.Rule, m queue.Message, msgID string) (retry.AdmitResult, error) {
		got = r
		return retry.AdmitResult{Outcome: retry.Admitted}, nil
	})
	if _, err := admit(context.Background(), retry.Rule{Name: "relaxed"}, queue.Message{}, "id"); err != nil || got != set.Rule("relaxed") {
		t.Errorf("Admit handed %p (err %v), want the rule in force %p", got, err, set.Rule("relaxed"))
	}
	if _, err := admit(context.Background(), retry.Rule{Name: "gone"}, queue.Message{}, "id"); err == nil {
		t.Error("Admit of a removed rule: no error")
	}
	if Retrier(nil) != nil || DeadLetters(nil) != nil {
		t.Error("a nil store must be a nil interface, so the drainer sees it has none")
	}
}
