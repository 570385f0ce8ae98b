package rules

import (
	"strings"
	"time"
)

// unitTable is the one table of rate units in sluice: envoy's units (second to day),
// plus week, and envoy's fixed lengths for month (30 days) and year (365 days); from
// the shortest to the longest. The rules file, PATCH /v1/admin/queues bodies and the
// admin API's answers all spell rates with these names.
var unitTable = []struct {
	name string
	d    time.Duration
}{
	{"second", time.Second},
	{"minute", time.Minute},
	{"hour", time.Hour},
	{"day", 24 * time.Hour},
	{"week", 7 * 24 * time.Hour},
	{"month", 30 * 24 * time.Hour},
	{"year", 365 * 24 * time.Hour},
}

// UnitNames returns the rate unit names in lower case, from the shortest to the longest.
func UnitNames() []string {
	out := make([]string, len(unitTable))
	for i, u := range unitTable {
		out[i] = u.name
	}
	return out
}

// UnitDuration returns the length of the named rate unit. Names are case-insensitive, as
// envoyproxy/ratelimit upper-cases them ("MINUTE" is "minute"); only strings.ToLower's
// folding counts (not Unicode's wider one, which would take "ſecond" for "second").
func UnitDuration(name string) (time.Duration, bool) {
	name = strings.ToLower(name)
	for _, u := range unitTable {
		if u.name == name {
			return u.d, true
		}
	}
	return 0, false
}

// UnitOf returns the name of the unit exactly d long ("minute" for time.Minute), or false
// when d is no single unit (an `interval:` such as 30s).
func UnitOf(d time.Duration) (string, bool) {
	for _, u := range unitTable {
		if u.d == d {
			return u.name, true
		}
	}
	return "", false
}
