package adaptive

import "github.com/sluice-io/sluice/internal/rules"

// FromRule is the Config of a rule's delivery.adaptive (its min_outflow in deliveries per
// second). The engine builds one Limiter per rule with it when a.Enabled.
func FromRule(a rules.Adaptive) Config {
	return Config{Decrease: a.Decrease, IncreasePerSecond: a.IncreasePerSecond, MinOutflow: a.MinOutflow.PerSecond()}
}
