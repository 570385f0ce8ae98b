// Package window is when a rule's deliveries may happen: the rule option
// `delivery.window` (docs/rules.md), parsed by internal/rules and applied by the drain
// engine, and the zone of a message (`time_zone` at submit, validated with LoadZone). A
// key's override may carry a window of its own (Spec, its JSON and one-line text form).
//
// # Model
//
// A Window is a daily stretch of wall-clock time, From to To, on some days of the week,
// in a time zone: the rule's, or each message's own (FromMessage; the rule's zone for a
// message without one). From > To crosses midnight, and a night belongs to the day it
// starts (mon-fri 22:00–06:00 is open Saturday 03:00, closed Monday 03:00). Times are
// the zone's wall clock, so a daylight-saving change moves the window with the clock: a
// From the spring-forward night skips opens at the change; the repeated hour of the
// fall-back night is in the window both times it happens.
//
// Open(t, zone) says whether a delivery may start at t; NextOpen(t, zone) is the first
// instant ≥ t it may (t when open). The engine holds a key whose head's window is closed
// until NextOpen, keeping the key's order and outflow.
//
// # Zero value, concurrency, defaults
//
// The zero Window (Set false) is always open: a rule without `delivery.window`. Days 0
// means every day; a nil Zone is UTC. Windows are values, immutable, safe for concurrent
// use; LoadZone caches the zones it loaded (a sync.Map).
//
// # Files
//
//   - window.go: Window, Open, NextOpen; ParseDays, ParseClock and LoadZone
//   - spec.go: Spec, a window as JSON carries it (a key override's), checked naming its
//     fields; its one-line text ("mon-fri 09:00-18:00 Europe/Paris")
//   - doc.go: this overview
package window
