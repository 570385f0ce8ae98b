package rules

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docSection returns the text of docs/rules.md under heading, up to the next heading of
// the same or a higher level.
func docSection(t *testing.T, md, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		if l != heading {
			continue
		}
		var out []string
		for _, m := range lines[i+1:] {
			if n := strings.IndexByte(m, ' '); strings.HasPrefix(m, "#") && n > 0 && n <= level && strings.Trim(m[:n], "#") == "" {
				break
			}
			out = append(out, m)
		}
		return strings.Join(out, "\n")
	}
	t.Fatalf("docs/rules.md has no heading %q", heading)
	return ""
}

var docRowRE = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.*) \\|$")

// docRows maps the first cell of every table row of md (a `code` cell) to the rest.
func docRows(md string) map[string]string {
	out := map[string]string{}
	for _, m := range docRowRE.FindAllStringSubmatch(md, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// Each table of docs/rules.md lists exactly the fields the loader accepts in that object:
// a field the loader takes is documented, and a documented one is not refused.
func TestDocsListEveryField(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, c := range []struct {
		heading string
		fields  []string
	}{
		{"## Document", documentFields},
		{"## Descriptor", descriptorFields},
		{"## rate_limit", envoyLimitFields},
		{"### replaces", replacesFields},
		{"## Rates", rateFields},
		{"## queue", queueFields},
		{"## park", parkFields},
		{"## sink", sinkFields},
		{"## delivery", deliveryFields},
		{"## delivery.window", windowFields},
		{"## delivery.adaptive", adaptiveFields},
		{"## sink.breaker", breakerFields},
		{"## limit_override", overrideFields},
	} {
		rows := docRows(docSection(t, md, c.heading))
		for _, f := range c.fields {
			if _, ok := rows[f]; !ok {
				t.Errorf("docs/rules.md %q: the loader accepts %s, the table does not list it", c.heading, f)
			}
		}
		var documented []string
		for f := range rows {
			documented = append(documented, f)
		}
		sort.Strings(documented)
		for _, f := range documented {
			if !slices.Contains(c.fields, f) {
				t.Errorf("docs/rules.md %q lists %s, which the loader refuses there", c.heading, f)
			}
		}
	}
	// The list form of rate_limit takes a subset of envoy's single mapping, which the
	// rate_limit table documents.
	for _, f := range listLimitFields {
		if !slices.Contains(envoyLimitFields, f) {
			t.Errorf("a listed limit takes %s, which the rate_limit table (envoy's fields) does not cover", f)
		}
	}
	unitRow := docRows(docSection(t, md, "## rate_limit"))["unit"]
	for _, u := range UnitNames() {
		if !strings.Contains(unitRow, "`"+u+"`") {
			t.Errorf("docs/rules.md: unit %s is not in the rate_limit table's unit row", u)
		}
	}
	algRow := docRows(docSection(t, md, "## rate_limit"))["algorithm"]
	for a := range algorithms {
		if !strings.Contains(algRow, "`"+string(a)+"`") {
			t.Errorf("docs/rules.md: algorithm %s is not in the rate_limit table", a)
		}
	}
}

// shortDuration writes d as a rules file would: 24h, 5m, 10s.
func shortDuration(d time.Duration) string {
	s := d.String() // "24h0m0s", "5m0s", "10s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// The defaults table of docs/rules.md says what the loader fills in.
func TestDocsDefaults(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docRows(docSection(t, string(b), "## Defaults"))
	for field, want := range map[string]string{
		"rate_limit.algorithm":                  string(DefaultAlgorithm),
		"overflow":                              string(DefaultOverflow),
		"ordering":                              string(DefaultOrdering),
		"park.max_age":                          shortDuration(DefaultParkMaxAge),
		"sink.timeout":                          shortDuration(DefaultSinkTimeout),
		"delivery.max_attempts":                 strconv.Itoa(DefaultMaxAttempts),
		"delivery.min_backoff":                  shortDuration(DefaultMinBackoff),
		"delivery.max_backoff":                  shortDuration(DefaultMaxBackoff),
		"delivery.spacing":                      string(DefaultSpacing),
		"delivery.adaptive.decrease":            strconv.FormatFloat(DefaultAdaptiveDecrease, 'g', -1, 64),
		"delivery.adaptive.increase_per_second": strconv.FormatFloat(DefaultAdaptiveIncreasePerSecond, 'g', -1, 64),
		"sink.breaker.failures":                 strconv.Itoa(DefaultBreakerFailures),
		"sink.breaker.min_keys":                 strconv.Itoa(DefaultBreakerMinKeys),
		"sink.breaker.within":                   shortDuration(DefaultBreakerWithin),
		"sink.breaker.cool_down":                shortDuration(DefaultBreakerCoolDown),
		"sink.breaker.max_cool_down":            shortDuration(DefaultBreakerMaxCoolDown),
	} {
		got, ok := rows[field]
		switch {
		case !ok:
			t.Errorf("docs/rules.md's defaults have no %s", field)
		case !strings.Contains(got, "`"+want+"`"):
			t.Errorf("docs/rules.md: the default of %s is %q; the loader's is %s", field, got, want)
		}
	}
	if shortDuration(24*time.Hour) != "24h" || shortDuration(5*time.Minute) != "5m" || shortDuration(90*time.Second) != "1m30s" {
		t.Fatal("shortDuration is wrong")
	}
}
