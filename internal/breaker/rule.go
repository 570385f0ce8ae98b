package breaker

import "github.com/sluice-io/sluice/internal/rules"

// FromRule is the Config of a rule's sink.breaker. The engine builds one Breaker per rule
// with it when b.Enabled.
func FromRule(b rules.Breaker) Config {
	return Config{Failures: b.Failures, Keys: b.MinKeys, Window: b.Within, CoolDown: b.CoolDown, MaxCoolDown: b.MaxCoolDown}
}
