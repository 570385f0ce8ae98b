package rules

import (
	"strings"
	"testing"
	"time"
)

// A queue rule's checks count on counters of their own unless it says `checks: share`;
// limit_override bounds what a check's limit override may ask.
func TestParseChecksAndLimitOverride(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    rate_limit: {unit: day, requests_per_unit: 5}
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:8090/m"}
  - key: message_type
    value: receipt
    checks: share
    limit_override: {max_factor: 0}
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://127.0.0.1:8090/r"}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    limit_override: {max_factor: 3, max_window: 1h}
`)
	for _, c := range []struct {
		rule   string
		checks Checks
		lo     LimitOverride
	}{
		{"messaging_message_type_marketing", "", LimitOverride{}},
		{"messaging_message_type_receipt", ChecksShare, LimitOverride{Refused: true}},
		{"messaging_user", "", LimitOverride{MaxFactor: 3, MaxWindow: time.Hour}},
	} {
		r := s.Rule(c.rule)
		if r == nil {
			t.Fatalf("no rule %s in %v", c.rule, s.Rules())
		}
		if r.Checks != c.checks || r.LimitOverride != c.lo {
			t.Errorf("%s: checks %q limit_override %+v, want %q %+v", c.rule, r.Checks, r.LimitOverride, c.checks, c.lo)
		}
	}
}

func TestParseChecksErrors(t *testing.T) {
	t.Parallel()
	const q = "queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}\n    sink: {url: 'http://127.0.0.1:1/'}\n"
	for _, c := range []struct{ yaml, want string }{
		{"  - key: a\n    checks: share\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"descriptors[0].checks: only applies to a rule with a queue"},
		{"  - key: a\n    checks: spend\n    " + q, `descriptors[0].checks: must be own or share (got "spend")`},
		{"  - key: a\n    limit_override: {max_factor: -1}\n    " + q, "descriptors[0].limit_override.max_factor: must be between 0 and 1000000 (got -1)"},
		{"  - key: a\n    limit_override: {max_window: 9000h}\n    " + q, "descriptors[0].limit_override.max_window: must be at most 8760h0m0s"},
		{"  - key: a\n    limit_override: {max_windows: 1h}\n    " + q, `descriptors[0].limit_override.max_windows: unknown field (did you mean "max_window"?)`},
		{"  - key: a\n    limit_override: {max_factor: 2}\n", "descriptors[0].limit_override: only applies to a descriptor with rate_limit or queue"},
		// year × 1048576 wraps a time.Duration around: refused, not a negative window
		{"  - key: a\n    rate_limit: {unit: year, unit_multiplier: 1048576, requests_per_unit: 1}\n",
			"descriptors[0].rate_limit.unit_multiplier: makes a window longer than 292 years (got 1048576)"},
		// accepted before, then every check of the rule answered 500
		{"  - key: a\n    rate_limit: {interval: 2000000h, requests_per_unit: 4000000000}\n",
			"descriptors[0].rate_limit: the limiter cannot count this limit: rate or burst × interval(ms) exceeds 2^53"},
		{"  - key: a\n    rate_limit: {interval: 1500us, requests_per_unit: 1}\n",
			"descriptors[0].rate_limit: the limiter cannot count this limit: interval 1.5ms is not a whole number of milliseconds"},
	} {
		_, err := Parse("f.yaml", []byte("domain: x\ndescriptors:\n"+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
