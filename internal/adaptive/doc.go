// Package adaptive lets a sink's own answers steer each key's outflow: the rule option
// `delivery.adaptive` (docs/rules.md), applied by the drain engine.
//
// # Model
//
// AIMD per key, as TCP's congestion window. A throttle — a 429 or 503, with or without
// Retry-After, or a timeout — multiplies the key's outflow by Decrease (default 0.5), at
// most once a second, never below the floor (min_outflow, default 1 % of the configured
// outflow); a Retry-After also holds the key until then. Every second of successes (2xx)
// adds IncreasePerSecond (default 5 %) of the configured outflow back, 50 times slower
// while within 90–105 % of the outflow it was last throttled at (it probes the sink's
// limit gently instead of hitting it again at full speed), never above the configured
// outflow. A key is kept as a share of its configured outflow, so a change of the
// configured value (sluice tune, a per-key override) applies at once.
//
// Measured (TestConvergesToTheSinksLimit, simulated): a rule at 10/s against a sink that
// admits 7/s per key (sliding window, 429 + Retry-After in whole seconds) converges to
// 6.43/s with 0.2 % of attempts refused; without it 30 % are refused.
//
// # Zero value, concurrency, memory
//
// Use New (a zero Limiter has no map). A Limiter is safe for concurrent use (one mutex; the
// engine calls it once per delivery). It remembers only keys below their configured
// outflow or held: a key back at its configured outflow is forgotten, and at most MaxKeys
// (default 100,000, about 100 bytes each) are kept — past that a random one is forgotten
// (Evicted counts them) and goes back to its configured outflow until throttled again.
//
// # Files
//
//   - adaptive.go: Config, Limiter and its OnThrottle, OnSuccess, Rate, Every, HeldUntil
//   - rule.go: FromRule, a rule's delivery.adaptive as a Config
//   - doc.go: this overview
package adaptive
