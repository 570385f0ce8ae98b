package rules

import (
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	for _, c := range []struct {
		name string
		d    time.Duration
		ok   bool
	}{
		{"second", time.Second, true}, {"MINUTE", time.Minute, true}, {"Hour", time.Hour, true},
		{"day", 24 * time.Hour, true}, {"week", 168 * time.Hour, true}, {"month", 720 * time.Hour, true},
		{"year", 8760 * time.Hour, true}, {"ſecond", 0, false}, {"sec", 0, false}, {"", 0, false},
	} {
		d, ok := UnitDuration(c.name)
		if d != c.d || ok != c.ok {
			t.Errorf("UnitDuration(%q) = %v, %v; want %v, %v", c.name, d, ok, c.d, c.ok)
		}
	}
	if u, ok := UnitOf(time.Hour); u != "hour" || !ok {
		t.Errorf("UnitOf(1h) = %q, %v", u, ok)
	}
	if u, ok := UnitOf(30 * time.Second); ok {
		t.Errorf("UnitOf(30s) = %q, true; want no unit", u)
	}
	if got := UnitNames(); len(got) != 7 || got[0] != "second" || got[6] != "year" {
		t.Errorf("UnitNames() = %v", got)
	}
}
