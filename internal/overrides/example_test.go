package overrides_test

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/internal/overrides"
	"github.com/sluice-io/sluice/internal/rules"
)

func ExampleParsePatch() {
	p, err := overrides.ParsePatch([]byte(`{"outflow":{"unit":"second","requests_per_unit":5},"paused":true}`))
	fmt.Println(overrides.Override{}.Merge(p), err)

	_, err = overrides.ParsePatch([]byte(`{"outflow":{"unit":"second","requests_per_unit":0},"capacity":-1}`))
	var pe *overrides.PatchError
	fmt.Println(errors.Is(err, overrides.ErrInvalidPatch), errors.As(err, &pe), pe.Field)
	fmt.Println(err)
	// Output:
	// outflow=5/1s paused <nil>
	// true true capacity
	// overrides: capacity: must be ≥ 1 (got -1); outflow.requests_per_unit: must be ≥ 1 (got 0)
}

func ExampleEffective() {
	set, _ := rules.Parse("orders.yaml", []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders-per-merchant
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	r := set.Rule("orders-per-merchant")
	p, _ := overrides.ParsePatch([]byte(`{"outflow":{"interval":"1s","requests_per_unit":2}}`))
	eff, err := overrides.Effective(r, overrides.Override{}.Merge(p))
	fmt.Println(eff.Queue.Capacity, eff.Queue.Outflow.Every(), r.Queue.Outflow.Every(), err)
	// Output: 100 500ms 100ms <nil>
}
