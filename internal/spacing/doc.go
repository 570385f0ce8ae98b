// Package spacing decides when a key's next delivery may start: the rule option
// `delivery.spacing` (docs/rules.md), gcra (the default) or strict.
//
// # Model
//
// A key is paced by GCRA: its theoretical arrival time (TAT) advances by every
// (1/outflow) per delivery, so over any long stretch the key gets outflow deliveries per
// second — but a delivery that started late does not push the next slot back, so the next
// one may start less than every after it (a key at 10/s can see 11 starts within 999 ms).
// strict adds one condition: the next start is also at least every after the actual start
// of the previous delivery, so no two starts of a key are ever closer than every, for
// downstreams that count with a sliding window. The price: a late start delays every
// later one, so a key that is often late gets less than outflow.
//
// NextSlot is when the next delivery may start; Advance is the TAT after a delivery
// starts. The drain engine calls both per key, in memory.
//
// # Zero value, concurrency, defaults
//
// Pure functions of their arguments; no state, safe for concurrent use. A zero prevTAT or
// lastStart means "none yet". every ≤ 0 means unpaced: NextSlot returns now. The rule's
// default mode is gcra (rules.SpacingGCRA).
//
// # Files
//
//   - spacing.go: NextSlot and Advance
//   - doc.go: this overview
package spacing
