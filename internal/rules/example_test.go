package rules_test

import (
	"fmt"
	"os"

	"github.com/sluice-io/sluice/internal/rules"
)

func ExampleSet_Match() {
	set, err := rules.Parse("orders.yaml", []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders-per-merchant
    queue:
      capacity: 100
      outflow: {unit: second, requests_per_unit: 10}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, ok := set.Match("orders", []rules.Entry{{Key: "merchant_id", Value: "m-42"}})
	fmt.Println(ok, m.Rule.Name, m.Key, m.Rule.Queue.Capacity, m.Rule.Queue.Outflow.Every())
	// Output: true orders-per-merchant m-42 100 100ms
}

func ExampleParse_error() {
	_, err := rules.Parse("orders.yaml", []byte(`domain: orders
descriptors:
  - key: merchant_id
    queue: {capacity: 0, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	fmt.Println(err)
	// Output: rules: orders.yaml:4: descriptors[0].queue.capacity: must be ≥ 1 (got 0)
}

func ExampleCheckConfig() {
	if err := rules.CheckConfig(os.Stdout, "../../deploy/examples/auth.yaml"); err != nil {
		return
	}
	// Output:
	// rules: OK: 1 rules (0 queue rules, 1 check-only rules) in 1 domains from 1 files
	//   auth-login  auth  auth_type=login  check-only; limit 5/1m0s fixed_window
}
