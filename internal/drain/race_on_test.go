//go:build race

package drain_test

// raceOn: the race detector slows everything several times; counts per delivery that include
// a per-second cost (ownership renewals) are not asserted under it.
const raceOn = true
