package decide

import (
	"testing"
	"time"
)

// The envoy units, now read from internal/rules' one units table, are envoy's seven, with
// the lengths envoyproxy/ratelimit counts (written out here), longest first.
func TestEnvoyUnitsAreEnvoys(t *testing.T) {
	t.Parallel()
	want := []envoyUnit{
		{"YEAR", 365 * 24 * time.Hour}, {"MONTH", 30 * 24 * time.Hour}, {"WEEK", 7 * 24 * time.Hour},
		{"DAY", 24 * time.Hour}, {"HOUR", time.Hour}, {"MINUTE", time.Minute}, {"SECOND", time.Second},
	}
	if len(units) != len(want) {
		t.Fatalf("units = %v, want %v", units, want)
	}
	for i := range want {
		if units[i] != want[i] {
			t.Errorf("units[%d] = %v, want %v", i, units[i], want[i])
		}
	}
}

// Only envoy's upper-case names are units of an override: the rules' lower-case names, and
// names that case folding would turn into one, stay refused as they always were.
func TestEnvoyUnitNamesAreExact(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]time.Duration{"SECOND": time.Second, "MINUTE": time.Minute, "WEEK": 7 * 24 * time.Hour, "YEAR": 365 * 24 * time.Hour} {
		if d, ok := unitDuration(name); !ok || d != want {
			t.Errorf("unitDuration(%q) = %v, %v; want %v", name, d, ok, want)
		}
	}
	for _, name := range []string{"second", "Second", "minute", "week", "UNKNOWN", "", "MILLISECOND",
		"WEE\u212A",   // a Kelvin sign: strings.ToLower makes it "week"
		"M\u0130NUTE", // a dotted capital I: strings.ToLower makes it "minute"
	} {
		if d, ok := unitDuration(name); ok {
			t.Errorf("unitDuration(%q) = %v: a unit name envoy does not send was accepted", name, d)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		name string
		mult uint32
	}{
		{time.Second, "SECOND", 1}, {30 * time.Second, "SECOND", 30}, {90 * time.Minute, "MINUTE", 90},
		{48 * time.Hour, "DAY", 2}, {14 * 24 * time.Hour, "WEEK", 2}, {60 * 24 * time.Hour, "MONTH", 2},
		{365 * 24 * time.Hour, "YEAR", 1}, {1500 * time.Millisecond, "UNKNOWN", 1},
	} {
		if name, mult := unitOf(c.d); name != c.name || mult != c.mult {
			t.Errorf("unitOf(%v) = %s×%d, want %s×%d", c.d, name, mult, c.name, c.mult)
		}
	}
}
