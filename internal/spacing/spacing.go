package spacing

import "time"

// NextSlot is the earliest time the key's next delivery may start.
//
// prevTAT is the key's theoretical arrival time (what Advance returned after its previous
// delivery; zero for none), lastStart the actual start of its previous delivery (zero for
// none), every the interval at the key's current outflow (1/outflow, after any adaptive
// decrease). gcra (strict false): max(prevTAT, now). strict: also ≥ lastStart+every, so
// two starts of a key are never closer than every, however late the previous one was.
func NextSlot(prevTAT, lastStart, now time.Time, every time.Duration, strict bool) time.Time {
	slot := now
	if every <= 0 {
		return slot
	}
	if prevTAT.After(slot) {
		slot = prevTAT
	}
	if strict && !lastStart.IsZero() {
		if s := lastStart.Add(every); s.After(slot) {
			slot = s
		}
	}
	return slot
}

// Advance is the key's TAT after a delivery that started at start: one interval after the
// previous TAT while the key keeps up (so a slightly late start does not lose the key
// its rate), or one interval after start when the key fell more than an interval behind
// (an idle key does not bank a burst). It is the GCRA step the engine already uses; with
// strict spacing NextSlot's lastStart term does the rest.
func Advance(prevTAT, start time.Time, every time.Duration) time.Time {
	if every <= 0 {
		return start
	}
	if prevTAT.IsZero() || start.Sub(prevTAT) >= every {
		return start.Add(every)
	}
	next := prevTAT.Add(every)
	if next.Before(start) {
		next = start.Add(every)
	}
	return next
}
