// Package breaker pauses a rule's deliveries while its sink fails for every key: the rule
// option `sink.breaker` (docs/rules.md), applied by the drain engine.
//
// # Model
//
// Closed → Open when the sink itself fails: the last Failures failures (default 10) all
// within Window (10 s), over at least Keys distinct keys (3), and no success for Window.
// A failure is what says the sink is down, not that one key is too fast: connection
// refused or reset, DNS or TLS, a 5xx other than 503, a timeout. One key failing (its
// payload crashes the sink) never opens it.
//
// Open: Allow says no; the engine leaves the rule's keys waiting and counts no attempt
// (a refused delivery is not an attempt, so max_attempts is not used up by an outage).
// After the cool-down (5 s, doubling per failed probe up to MaxCoolDown, 5 m) the next
// Allow says yes once: Half-open, that delivery is the probe. Its success closes the
// breaker (cool-down back to 5 s); its failure reopens it. A probe not answered within
// ProbeTimeout (1 m) is replaced.
//
// Each drainer keeps its own breaker per rule (no coordination: every drainer sees the
// same sink). sluice_breaker_state{rule} (0 closed, 1 half-open, 2 open) and
// sluice_breaker_transitions_total{rule,to} are in Metrics, registered by the caller.
//
// # Zero value, concurrency, defaults
//
// Use New (zero Config fields take the defaults above). A Breaker is safe for concurrent
// use (one mutex); a nil *Metrics records nothing.
//
// # Files
//
//   - breaker.go: State, Config, Breaker and its Allow, Until, OnSuccess, OnFailure
//   - metrics.go: Metrics, the Prometheus collectors
//   - rule.go: FromRule, a rule's sink.breaker as a Config
//   - doc.go: this overview
package breaker
