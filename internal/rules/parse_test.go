package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zones from the binary, not the machine
)

func mustParse(t testing.TB, yaml string) *Set {
	t.Helper()
	s, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: orders
descriptors:
  - key: merchant_id
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}
    sink: {url: "http://x/y"}
  - key: auth_type
    value: login
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	q := s.Rule("orders_merchant_id")
	if q == nil {
		t.Fatalf("default name: rules are %v", names(s))
	}
	want := &Rule{
		Name: "orders_merchant_id", Domain: "orders", Path: []PathEntry{{Key: "merchant_id"}},
		Queue:    &Queue{Capacity: 1, Outflow: Rate{1, time.Second}, MaxScheduled: 1},
		Overflow: OverflowReject, Park: Park{MaxAge: 24 * time.Hour},
		Sink:     Sink{URL: "http://x/y", Timeout: 10 * time.Second},
		Delivery: Delivery{MaxAttempts: 8, MinBackoff: time.Second, MaxBackoff: 5 * time.Minute, MaxInFlight: 1},
		Ordering: OrderingStrict, File: "test.yaml", Line: 4, varying: []int{0},
	}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("queue rule:\n got %+v\nwant %+v", q, want)
	}
	l := s.Rule("orders_auth_type_login")
	if l == nil {
		t.Fatalf("rules are %v", names(s))
	}
	wantLimit := []RateLimit{{Rate: Rate{5, time.Minute}, Algorithm: FixedWindow, Burst: 5}}
	if !reflect.DeepEqual(l.RateLimits, wantLimit) || l.HasQueue() || l.KeyLevels() != 0 {
		t.Errorf("limit rule: %+v", l)
	}
	if err := q.Validate(); err != nil {
		t.Error(err)
	}
	if err := l.Validate(); err != nil {
		t.Error(err)
	}
}

func names(s *Set) []string {
	var out []string
	for _, r := range s.Rules() {
		out = append(out, r.Name)
	}
	return out
}

func TestParseEveryField(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    detailed_metric: true
    value_to_metric: false
    descriptors:
      - key: user_id
        name: marketing-per-user
        shadow_mode: true
        rate_limit:
          - {unit: day, requests_per_unit: 5, algorithm: sliding_window_counter, name: daily}
          - {interval: 30s, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
          - {unit: WEEK, requests_per_unit: 20, algorithm: sliding_window_log}
          - {unit: Hour, requests_per_unit: 9, algorithm: leaky_bucket}
          - {unit: second, requests_per_unit: 1, algorithm: fixed_window}
        queue:
          capacity: 50
          outflow: {interval: 500ms, requests_per_unit: 1}
          total_outflow: {unit: minute, requests_per_unit: 600}
          max_scheduled: 7
          partitions: 4
        overflow: park
        park: {max_age: 48h}
        sink: {nats_subject: sms.send, timeout: 3s, max_in_flight: 40}
        delivery: {max_attempts: 3, min_backoff: 2s, max_backoff: 1m}
        ordering: relaxed
`)
	r := s.Rule("marketing-per-user")
	if r == nil {
		t.Fatalf("rules are %v", names(s))
	}
	want := &Rule{
		Name: "marketing-per-user", Domain: "messaging",
		Path:       []PathEntry{{"message_type", "marketing"}, {"user_id", ""}},
		ShadowMode: true,
		RateLimits: []RateLimit{
			{Rate{5, 24 * time.Hour}, SlidingWindowCounter, 5, "daily", nil},
			{Rate{2, 30 * time.Second}, TokenBucket, 4, "", nil},
			{Rate{20, 7 * 24 * time.Hour}, SlidingWindowLog, 20, "", nil},
			{Rate{9, time.Hour}, LeakyBucket, 9, "", nil},
			{Rate{1, time.Second}, FixedWindow, 1, "", nil},
		},
		Queue:    &Queue{Capacity: 50, Outflow: Rate{1, 500 * time.Millisecond}, TotalOutflow: Rate{600, time.Minute}, MaxScheduled: 7, Partitions: 4},
		Overflow: OverflowPark, Park: Park{MaxAge: 48 * time.Hour},
		Sink:     Sink{NATSSubject: "sms.send", Timeout: 3 * time.Second, MaxInFlight: 40},
		Delivery: Delivery{MaxAttempts: 3, MinBackoff: 2 * time.Second, MaxBackoff: time.Minute, MaxInFlight: 1},
		Ordering: OrderingRelaxed, File: "test.yaml", Line: 9, varying: []int{1},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("\n got %+v\nwant %+v", r, want)
	}
}

func TestParseEnvoyFields(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: envoy
descriptors:
  - key: a
    rate_limit: {unlimited: true, name: free}
  - key: b
    value: "x*"
    share_threshold: true
    rate_limit: {unit: SECOND, requests_per_unit: 0, name: blocked, replaces: [{name: other}, {name: more}]}
  - key: c
    value: 123
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: d
    rate_limit: {unit: year, requests_per_unit: 1}
`)
	a := s.Rule("envoy_a")
	if a == nil || !a.Unlimited || len(a.RateLimits) != 0 {
		t.Errorf("unlimited: %+v", a)
	}
	b := s.Rule("envoy_b_x_")
	if b == nil || !reflect.DeepEqual(b.Replaces, []string{"other", "more"}) || b.RateLimits[0].Name != "blocked" ||
		b.RateLimits[0].Rate != (Rate{0, time.Second}) || b.KeyLevels() != 0 {
		t.Errorf("replaces/share_threshold: %+v", b)
	}
	c := s.Rule("envoy_c_123")
	if c == nil || c.Path[0].Value != "123" || c.RateLimits[0].Rate.Interval != 30*24*time.Hour {
		t.Errorf("numeric value / month: %+v", c)
	}
	if d := s.Rule("envoy_d"); d == nil || d.RateLimits[0].Rate.Interval != 365*24*time.Hour {
		t.Errorf("year: %+v", d)
	}
}

// TestParseTimeZone: time_zone names an IANA zone for a fixed window (envoy's mapping
// and sluice's list), loaded from the embedded tzdata.
func TestParseTimeZone(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: messaging
descriptors:
  - key: user_id
    rate_limit: {unit: day, requests_per_unit: 5, time_zone: Asia/Seoul}
  - key: team_id
    rate_limit:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket}
      - {unit: hour, requests_per_unit: 100, time_zone: Asia/Kathmandu}
      - {unit: day, requests_per_unit: 1000}
`)
	l := s.Rule("messaging_user_id").RateLimits[0]
	if l.TimeZone == nil || l.TimeZone.String() != "Asia/Seoul" || l.Rate != (Rate{5, 24 * time.Hour}) {
		t.Errorf("user_id: %+v", l)
	}
	ls := s.Rule("messaging_team_id").RateLimits
	if ls[0].TimeZone != nil || ls[1].TimeZone == nil || ls[1].TimeZone.String() != "Asia/Kathmandu" || ls[2].TimeZone != nil {
		t.Errorf("team_id: %+v", ls)
	}
	if _, off := time.Date(2026, 1, 1, 0, 0, 0, 0, ls[1].TimeZone).Zone(); off != 5*3600+45*60 {
		t.Errorf("Kathmandu offset %d", off)
	}

	// The rate_limit that deploy/examples/marketing.yaml suggests in a comment works.
	raw, err := os.ReadFile("../../deploy/examples/marketing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var suggested, current string
	for _, line := range strings.Split(string(raw), "\n") {
		if l := strings.TrimSpace(strings.TrimPrefix(line, "#")); strings.HasPrefix(l, "rate_limit:") && strings.Contains(l, "time_zone") {
			suggested = l
		} else if l := strings.TrimSpace(line); strings.HasPrefix(l, "rate_limit:") {
			current = l
		}
	}
	if suggested == "" || current == "" {
		t.Fatalf("marketing.yaml: suggested %q, current %q", suggested, current)
	}
	set, err := Parse("marketing.yaml", []byte(strings.Replace(string(raw), current, suggested, 1)))
	if err != nil {
		t.Fatalf("the suggested %s: %v", suggested, err)
	}
	if l := set.Rule("marketing-per-user").RateLimits[0]; l.TimeZone == nil || l.Algorithm != FixedWindow || l.Rate != (Rate{5, 24 * time.Hour}) {
		t.Errorf("the suggested limit reads %+v", l)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const q = "queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}"
	tests := []struct {
		name, yaml string
		want       []string // each a full error line
	}{
		{"syntax", "domain: x\ndescriptors: [\n", []string{"f.yaml:2: invalid YAML: did not find expected node content"}},
		{"not a mapping", "- a\n", []string{"f.yaml:1: must be a mapping (got a list)"}},
		{"empty domain", "descriptors: []\n", []string{"f.yaml:1: domain: required (a document cannot have an empty domain)"}},
		{"unknown top field", "domain: x\ndescriptor: []\n", []string{`f.yaml:2: descriptor: unknown field (did you mean "descriptors"?)`}},
		{"unknown field no suggestion", "domain: x\nzzzzzzzz: 1\n", []string{`f.yaml:2: zzzzzzzz: unknown field (allowed: domain, descriptors)`}},
		{"duplicate field", "domain: x\ndomain: y\n", []string{"f.yaml:2: domain: duplicate field"}},
		{"descriptors not list", "domain: x\ndescriptors: {key: a}\n", []string{"f.yaml:2: descriptors: must be a list of descriptors (got a mapping)"}},
		{"empty key", "domain: x\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"f.yaml:3: descriptors[0].key: required (a descriptor cannot have an empty key)"}},
		{"key not string", "domain: x\ndescriptors:\n  - key: [a]\n", []string{"f.yaml:3: descriptors[0].key: must be a string (got a list)"}},
		{"duplicate descriptor", "domain: x\ndescriptors:\n  - key: a\n  - key: a\n",
			[]string{`f.yaml:4: descriptors[1]: duplicate descriptor key="a" (an earlier sibling has the same key and value)`}},
		{"duplicate wildcard", "domain: x\ndescriptors:\n  - {key: a, value: 'b*'}\n  - {key: a, value: 'b*'}\n",
			[]string{`f.yaml:4: descriptors[1]: duplicate descriptor key="a" value="b*" (an earlier sibling has the same key and value)`}},
		{"typo in descriptor", "domain: x\ndescriptors:\n  - key: a\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limt: unknown field (did you mean "rate_limit"?)`}},
		{"bad unit", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year (got "fortnight"); or use interval: <duration>`}},
		{"unit and interval", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, interval: 1s, requests_per_unit: 1}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.interval: set either unit or interval, not both"}},
		{"no unit", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit: required (or interval)"}},
		{"bad interval", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {interval: soon, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.interval: must be a duration like 30s, 5m or 24h (got "soon")`}},
		{"zero interval", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {interval: 0s, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.interval: must be > 0 (got 0s)`}},
		{"no requests", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: required"}},
		{"negative requests", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: must be ≥ 0 (got -1)"}},
		{"unknown time zone", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      time_zone: Asia/Seul\n",
			[]string{`f.yaml:7: descriptors[0].rate_limit.time_zone: unknown time zone "Asia/Seul" (an IANA name such as Asia/Seoul, America/New_York or UTC)`}},
		{"time zone Local", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 5, time_zone: Local}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.time_zone: must be an IANA time zone name such as Asia/Seoul or UTC (got "Local")`}},
		{"time zone of a sliding window", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 5, algorithm: sliding_window_counter, time_zone: Asia/Seoul}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.time_zone: only applies to fixed_window (algorithm is sliding_window_counter: it has no window edges for a time zone to move)`}},
		{"time zone of a week", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      - {unit: second, requests_per_unit: 5}\n      - {unit: week, requests_per_unit: 5, time_zone: Asia/Seoul}\n",
			[]string{`f.yaml:6: descriptors[0].rate_limit[1].time_zone: needs a window that divides a day (an hour, 6h, a day…; got 168h0m0s)`}},
		{"time zone of an unlimited limit", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, time_zone: Asia/Seoul}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.time_zone: must not be set when unlimited is true`}},
		{"requests not int", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: lots}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: must be an integer (got "lots")`}},
		{"unlimited with unit", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit: must not be set when unlimited is true"}},
		{"zero limit on a queue rule", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0}\n    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit: requests_per_unit: 0 would refuse every message of a queue rule (block with a check-only rule instead)"}},
		{"unit_multiplier zero", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, unit_multiplier: 0}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit_multiplier: must be 1 to 1048576 (got 0)"}},
		{"unit_multiplier with interval", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {interval: 30s, requests_per_unit: 1, unit_multiplier: 2}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit_multiplier: only applies with unit (interval is already a duration)"}},
		{"unit_multiplier when unlimited", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit_multiplier: 2}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit_multiplier: must not be set when unlimited is true"}},
		{"response_headers without a limit", "domain: x\ndescriptors:\n  - key: a\n    response_headers: true\n",
			[]string{"f.yaml:4: descriptors[0].response_headers: only applies to a descriptor with rate_limit"}},
		{"response_headers not bool", "domain: x\ndescriptors:\n  - key: a\n    response_headers: yes please\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].response_headers: must be true or false (got "yes please")`}},
		{"unlimited not bool", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: maybe}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.unlimited: must be true or false (got "maybe")`,
				"f.yaml:4: descriptors[0].rate_limit.unit: required (or interval)",
				"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: required"}},
		{"empty replaces", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.replaces[0].name: required (envoy: no empty replaces entry)"}},
		{"replaces itself", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit.replaces: must not name the limit itself ("n")`}},
		{"replaces own rule", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x_a}]}\n",
			[]string{`f.yaml:3: descriptors[0].rate_limit.replaces: must not name the rule itself ("x_a")`}},
		{"bad algorithm", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: [{unit: second, requests_per_unit: 1, algorithm: gcra}]\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit[0].algorithm: must be one of token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter (got "gcra")`}},
		{"burst on fixed window", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: [{unit: second, requests_per_unit: 1, burst: 3}]\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit[0].burst: only applies to token_bucket and leaky_bucket (algorithm is fixed_window)"}},
		{"zero burst", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: [{unit: second, requests_per_unit: 1, burst: 0, algorithm: token_bucket}]\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit[0].burst: must be ≥ 1 (got 0)"}},
		{"rate_limit not a mapping", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: 5\n    overflow: reject\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit: must be a mapping {unit, requests_per_unit, …} or a list of them (got "5")`}},
		{"empty limit list", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: []\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit: must list at least one limit"}},
		{"unlimited in list", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: [{unlimited: true}]\n",
			[]string{`f.yaml:4: descriptors[0].rate_limit[0].unlimited: unknown field (allowed: unit, interval, requests_per_unit, name, algorithm, burst, unit_multiplier, time_zone)`,
				"f.yaml:4: descriptors[0].rate_limit[0].unit: required (or interval)",
				"f.yaml:4: descriptors[0].rate_limit[0].requests_per_unit: required"}},
		{"capacity zero", "domain: x\ndescriptors:\n  - key: a\n    queue:\n      capacity: 0\n      outflow: {unit: second, requests_per_unit: 1}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:5: descriptors[0].queue.capacity: must be ≥ 1 (got 0)"}},
		{"no capacity", "domain: x\ndescriptors:\n  - key: a\n    queue: {outflow: {unit: second, requests_per_unit: 1}}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:4: descriptors[0].queue.capacity: required"}},
		{"no outflow", "domain: x\ndescriptors:\n  - key: a\n    queue: {capacity: 1}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:4: descriptors[0].queue.outflow: required"}},
		{"zero outflow", "domain: x\ndescriptors:\n  - key: a\n    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 0}}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:4: descriptors[0].queue.outflow.requests_per_unit: must be ≥ 1 (got 0)"}},
		{"total below outflow", "domain: x\ndescriptors:\n  - key: a\n    queue:\n      capacity: 1\n      outflow: {unit: second, requests_per_unit: 10}\n      total_outflow: {unit: minute, requests_per_unit: 60}\n    sink: {url: 'http://h/'}\n",
			[]string{"f.yaml:7: descriptors[0].queue.total_outflow: must be ≥ outflow (1/s < 10/s): the whole rule cannot drain slower than one key"}},
		{"queue without sink", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n",
			[]string{"f.yaml:3: descriptors[0].sink: required for a rule with a queue (where should the drainers deliver?)"}},
		{"sink both", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/', nats_subject: a.b}\n",
			[]string{"f.yaml:5: descriptors[0].sink.nats_subject: set either url or nats_subject, not both"}},
		{"sink neither", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {timeout: 1s}\n",
			[]string{"f.yaml:5: descriptors[0].sink: needs url or nats_subject"}},
		{"sink bad url", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'ftp://h/'}\n",
			[]string{`f.yaml:5: descriptors[0].sink.url: must be an absolute http:// or https:// URL (got "ftp://h/")`}},
		{"sink wildcard subject", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {nats_subject: 'a.*'}\n",
			[]string{`f.yaml:5: descriptors[0].sink.nats_subject: must be a NATS subject without wildcards or spaces, like orders.accepted (got "a.*")`}},
		{"sink bad timeout", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/', timeout: -1s}\n",
			[]string{`f.yaml:5: descriptors[0].sink.timeout: must be > 0 (got -1s)`}},
		{"bad overflow", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    overflow: drop\n",
			[]string{`f.yaml:6: descriptors[0].overflow: must be reject or park (got "drop")`}},
		{"park without queue or limit", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true}\n    overflow: park\n",
			[]string{"f.yaml:5: descriptors[0].overflow: park needs a queue or a rate_limit to wait for"}},
		{"park without sink", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    overflow: park\n",
			[]string{"f.yaml:5: descriptors[0].overflow: park needs a sink to deliver re-admitted messages"}},
		{"park settings with reject", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    park: {max_age: 1h}\n",
			[]string{"f.yaml:6: descriptors[0].park: only applies with overflow: park"}},
		{"bad max_age", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    overflow: park\n    park: {max_age: 1d}\n",
			[]string{`f.yaml:7: descriptors[0].park.max_age: must be a duration like 30s, 5m or 24h (got "1d")`}},
		{"bad partitions", "domain: x\ndescriptors:\n  - key: a\n    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}, partitions: 0}\n    sink: {url: 'http://h/'}\n",
			[]string{`f.yaml:4: descriptors[0].queue.partitions: must be 1 to 256 (got 0)`}},
		{"bad ordering", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    ordering: fifo\n",
			[]string{`f.yaml:6: descriptors[0].ordering: must be strict or relaxed (got "fifo")`}},
		{"delivery without sink", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    delivery: {max_attempts: 2}\n",
			[]string{"f.yaml:5: descriptors[0].delivery: only applies to a rule with a sink"}},
		{"bad delivery", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    delivery: {max_attempts: 0, min_backoff: 1m, max_backoff: 1s}\n",
			[]string{"f.yaml:6: descriptors[0].delivery.max_attempts: must be between 1 and 1000000 (got 0)",
				"f.yaml:6: descriptors[0].delivery.max_backoff: must be ≥ min_backoff (1s < 1m0s)"}},
		{"max_in_flight with strict ordering", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    delivery: {max_in_flight: 5}\n",
			[]string{"f.yaml:6: descriptors[0].delivery.max_in_flight: above 1 needs ordering: relaxed (with several deliveries of a key at once, a later message may arrive first); got 5 with ordering: strict"}},
		{"bad max_in_flight", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/'}\n    ordering: relaxed\n    delivery: {max_in_flight: 0}\n",
			[]string{"f.yaml:7: descriptors[0].delivery.max_in_flight: must be between 1 and 1000 (got 0)"}},
		{"bad sink max_in_flight", "domain: x\ndescriptors:\n  - key: a\n    " + q + "\n    sink: {url: 'http://h/', max_in_flight: 0}\n",
			[]string{"f.yaml:5: descriptors[0].sink.max_in_flight: must be between 1 and 100000 (got 0)"}},
		{"behaviour on plain descriptor", "domain: x\ndescriptors:\n  - key: a\n    name: foo\n    sink: {url: 'http://h/'}\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"f.yaml:4: descriptors[0].name: only applies to a descriptor with rate_limit or queue",
				"f.yaml:5: descriptors[0].sink: only applies to a descriptor with rate_limit or queue"}},
		{"bad name", "domain: x\ndescriptors:\n  - key: a\n    name: 'orders.v1'\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: descriptors[0].name: must be 1–128 characters of [A-Za-z0-9_-] (got "orders.v1"): it is used in NATS stream names, metrics and URLs`}},
		{"duplicate explicit name", "domain: x\ndescriptors:\n  - key: a\n    name: n\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    name: n\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:6: descriptors[1].name: name "n" is already used by the rule at f.yaml:3; rule names must be unique (set name explicitly)`}},
		{"default names collide", "domain: x\ndescriptors:\n  - key: a\n    value: b.c\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: b_c\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:6: descriptors[1].name: name "x_a_b_c" is already used by the rule at f.yaml:3; rule names must be unique (set name explicitly)`}},
		{"share_threshold without wildcard", "domain: x\ndescriptors:\n  - key: a\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{"f.yaml:4: descriptors[0].share_threshold: only applies to a wildcard value (one containing '*')"}},
		{"duplicate domain", "domain: x\n---\ndomain: x\n",
			[]string{`f.yaml:3: domain: duplicate domain "x" (first defined at f.yaml:1; -merge-domain-config merges them)`}},
		{"merge key", "domain: x\ndescriptors:\n  - &d {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n  - <<: *d\n    key: b\n",
			[]string{"f.yaml:4: descriptors[1].<<: YAML merge keys (<<) are not supported; write the fields out"}},
		{"nested field path", "domain: x\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            rate_limit: {unit: eon, requests_per_unit: 1}\n",
			[]string{`f.yaml:8: descriptors[0].descriptors[0].descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year (got "eon"); or use interval: <duration>`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse("f.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error; rules %v", names(s))
			}
			if s != nil {
				t.Errorf("a Set was returned with the error")
			}
			if !strings.HasPrefix(err.Error(), "rules: ") {
				t.Errorf("error not prefixed: %q", err)
			}
			var all ValidationErrors
			if !errors.As(err, &all) {
				t.Fatalf("not ValidationErrors: %T %v", err, err)
			}
			var got []string
			for _, e := range all {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors:\n got %q\nwant %q", got, tt.want)
			}
			var first *ValidationError
			if !errors.As(err, &first) || first.File != "f.yaml" || first != all[0] {
				t.Errorf("errors.As *ValidationError: %+v", first)
			}
		})
	}
}

func TestValidationErrorFields(t *testing.T) {
	t.Parallel()
	_, err := Parse("deploy/examples/orders.yaml", []byte(`domain: orders
descriptors:
  - key: merchant_id
    queue:
      capacity: 0
      outflow: {unit: second, requests_per_unit: 10}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	want := ValidationError{File: "deploy/examples/orders.yaml", Line: 5, Field: "descriptors[0].queue.capacity", Message: "must be ≥ 1 (got 0)"}
	if *ve != want {
		t.Errorf("got %+v want %+v", *ve, want)
	}
	if got := err.Error(); got != "rules: deploy/examples/orders.yaml:5: descriptors[0].queue.capacity: must be ≥ 1 (got 0)" {
		t.Errorf("message %q", got)
	}
}

func TestParseErrorCap(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("domain: x\ndescriptors:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  - {key: k%d, rate_limit: {unit: bad, requests_per_unit: 1}}\n", i)
	}
	_, err := Parse("f.yaml", []byte(b.String()))
	var all ValidationErrors
	if !errors.As(err, &all) {
		t.Fatal(err)
	}
	if len(all) != MaxErrors+1 || all[MaxErrors].Message != "too many errors (10 more not shown)" {
		t.Errorf("got %d errors, last %v", len(all), all[len(all)-1])
	}
}

func TestParseEmptyAndMultiDocument(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "# only a comment\n", "---\n", "---\n---\n"} {
		s, err := Parse("f.yaml", []byte(in))
		if err != nil || len(s.Rules()) != 0 {
			t.Errorf("%q: %v %v", in, s, err)
		}
	}
	s := mustParse(t, "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n---\n---\ndomain: b\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	if got := names(s); !reflect.DeepEqual(got, []string{"a_k", "b_k"}) {
		t.Errorf("got %v", got)
	}
	if got := s.Domains(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("domains %v", got)
	}
}

func TestParseAliasBomb(t *testing.T) {
	t.Parallel()
	in := "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
		"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
	_, err := Parse("f.yaml", []byte(in))
	if err == nil || !strings.Contains(err.Error(), "too large or too deeply aliased") {
		t.Errorf("got %v", err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yml"), "domain: b\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not yaml: [")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"a_k", "b_k"}) {
		t.Errorf("got %v", got)
	}
	if got := s.Files(); !reflect.DeepEqual(got, []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")}) {
		t.Errorf("files %v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrNoRulesFiles) {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "rules: ") {
		t.Errorf("missing: %v", err)
	}
	// Duplicate domain across files, and errors from two files reported together.
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, "domain: x\ndescriptors:\n  - {key: k, rate_limit: {unit: nope, requests_per_unit: 1}}\n")
	writeFile(t, b, "\ndomain: x\n")
	_, err := Load(a, b)
	var all ValidationErrors
	if !errors.As(err, &all) || len(all) != 2 {
		t.Fatalf("got %v", err)
	}
	if all[0].File != a || all[0].Line != 3 || all[1].File != b || all[1].Line != 2 ||
		all[1].Message != fmt.Sprintf(`duplicate domain "x" (first defined at %s:1; -merge-domain-config merges them)`, a) {
		t.Errorf("got %q", all)
	}
}

// Every example must load on its own and together; the demo relies on these names.
func TestLoadExamples(t *testing.T) {
	t.Parallel()
	const dir = "../../deploy/examples"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext != ".yaml" && ext != ".yml" {
			continue
		}
		if _, err := Load(filepath.Join(dir, e.Name())); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	orders := s.Rule("orders-per-merchant")
	if orders == nil || orders.Queue.Capacity != 100 || orders.Queue.Outflow != (Rate{10, time.Second}) ||
		orders.Queue.TotalOutflow != (Rate{200, time.Second}) || orders.Overflow != OverflowPark ||
		orders.Sink.URL != "http://127.0.0.1:8090/sink/orders" {
		t.Errorf("orders: %+v", orders)
	}
	mk := s.Rule("marketing-per-user")
	if mk == nil || mk.Queue.Capacity != 50 || mk.RateLimits[0].Algorithm != SlidingWindowCounter ||
		mk.RateLimits[0].Rate != (Rate{5, 24 * time.Hour}) || mk.Sink.URL != "http://127.0.0.1:8090/sink/marketing" {
		t.Errorf("marketing: %+v", mk)
	}
	if a := s.Rule("auth-login"); a == nil || a.HasQueue() || a.RateLimits[0].Rate != (Rate{5, time.Minute}) {
		t.Errorf("auth: %+v", a)
	}
	if got := len(s.QueueRules()); got != 2 {
		t.Errorf("queue rules: %d", got)
	}
	for _, r := range s.Rules() {
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}
	if m, ok := s.Match("orders", []Entry{{"merchant_id", "m-42"}}); !ok || m.Rule != orders || m.Key != "m-42" {
		t.Errorf("match orders: %+v %v", m, ok)
	}
}
