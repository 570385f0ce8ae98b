package rules

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The envoy parity suite, configuration half: what envoyproxy/ratelimit's configuration
// tests assert (its test/config fixtures and config_test.go), as cases over fixtures of
// our own (testdata/envoyparity). A case loads files and either expects a refusal that
// names the problem, or expects the limit each descriptor gets. The decision half
// (sequences of checks over gRPC, POST /v1/check and POST /json) is in
// internal/ingress/envoy_parity_test.go. docs/envoy.md lists what differs on
// purpose.

// parityLookup is one descriptor of domain and the limit envoy gives it: "none", or
// "<requests>/<unit>" with " name=…", " unlimited", " shadow", " quota", " detailed",
// " metadata=…" when they apply.
type parityLookup struct {
	domain string
	kv     []string
	want   string
}

type parityConfigCase struct {
	envoy   string // the envoy test (and fixture) the case stands for
	files   []string
	merge   bool
	refused string // a substring of the refusal; "" when the files must load
	differs string // why sluice answers otherwise than envoy on purpose (docs/envoy.md); "" when alike
	field   string // the field the refusal names ("" when it names none)
	lookups []parityLookup
}

var parityConfigCases = []parityConfigCase{
	{envoy: "TestBasicConfig (basic_config.yaml)", files: []string{"tree.yaml"}, lookups: []parityLookup{
		{"elsewhere", []string{"k", "v"}, "none"},                         // unknown domain
		{"shop", nil, "none"},                                             // no entries
		{"shop", []string{"tenant", "other"}, "none"},                     // no such value, no default
		{"shop", []string{"tenant", "acme"}, "none"},                      // a value that only holds children
		{"shop", []string{"client", "partner", "sub", "x"}, "none"},       // deeper than the tree
		{"shop", []string{"plan", "gold", "feature", "other"}, "none"},    // child value not configured
		{"shop", []string{"tenant", "acme", "route", "cart"}, "5/SECOND"}, // default at level 2
		{"shop", []string{"tenant", "acme", "route", "checkout"}, "10/SECOND"},
		{"shop", []string{"client", "anyone"}, "20/MINUTE"},
		{"shop", []string{"client", "partner"}, "30/MINUTE"},
		{"shop", []string{"client", "internal"}, "none"}, // a value without rate_limit: no limit
		{"shop", []string{"report", "r1"}, "1/HOUR"},
		{"shop", []string{"export", "e1"}, "1/DAY name=export_daily"},
		{"shop", []string{"plan", "gold"}, "15/DAY"},
		{"shop", []string{"plan", "gold", "feature", "search"}, "25/DAY"},
		{"shop", []string{"healthcheck", "h"}, "unlimited"},
		{"shop", []string{"api_key", "k1"}, "70/MINUTE detailed"},
		{"shop", []string{"api_key", "k2"}, "70/MINUTE detailed"},
	}},
	{envoy: "TestDomainMerge (merge_domain_key1/2.yaml, MERGE_DOMAIN_CONFIG)", files: []string{"merge_a.yaml", "merge_b.yaml"}, merge: true, lookups: []parityLookup{
		{"split", nil, "none"},
		{"split", []string{"region", "eu"}, "10/MINUTE"},
		{"split", []string{"region", "us"}, "20/MINUTE"},
	}},
	{envoy: "TestDomainMerge without the option (duplicate domain)", files: []string{"merge_a.yaml", "merge_b.yaml"},
		refused: `duplicate domain "split"`, field: "domain"},
	{envoy: "TestEmptyDomain (empty_domain.yaml)", files: []string{"no_domain.yaml"}, refused: "required", field: "domain"},
	{envoy: "TestDuplicateDomain (duplicate_domain.yaml)", files: []string{"tree.yaml", "same_domain.yaml"},
		refused: `duplicate domain "shop"`, field: "domain"},
	{envoy: "TestEmptyKey (empty_key.yaml)", files: []string{"no_key.yaml"}, refused: "required", field: "descriptors[0].key"},
	{envoy: "TestDuplicateKey (duplicate_key.yaml)", files: []string{"twin.yaml"}, refused: "duplicate descriptor", field: "descriptors[1]"},
	{envoy: "TestDuplicateKeyDomainMerge (one file twice, merged)", files: []string{"merge_a.yaml", "merge_a.yaml"}, merge: true,
		refused: "duplicate descriptor", field: "descriptors[0]"},
	{envoy: "TestBadLimitUnit (bad_limit_unit.yaml)", files: []string{"bad_unit.yaml"}, refused: `"fortnight"`, field: "descriptors[0].rate_limit.unit"},
	{envoy: "TestReplacesSelf (replaces_self.yaml)", files: []string{"replaces_itself.yaml"}, refused: "must not name the limit itself",
		field: "descriptors[0].descriptors[0].rate_limit.replaces"},
	{envoy: "TestReplacesEmpty (replaces_empty.yaml)", files: []string{"replaces_nothing.yaml"}, refused: "no empty replaces entry",
		field: "descriptors[0].descriptors[0].rate_limit.replaces[0].name"},
	{envoy: "TestBadYaml (bad_yaml.yaml)", files: []string{"broken.yaml"}, refused: "invalid YAML"},
	{envoy: "TestMisspelledKey (ratelimit)", files: []string{"typo_field.yaml"}, refused: `did you mean "rate_limit"`, field: "descriptors[0].ratelimit"},
	{envoy: "TestMisspelledKey (requestsperunit)", files: []string{"typo_limit_field.yaml"}, refused: "unknown field",
		field: "descriptors[0].rate_limit.requestsperunit"},
	{envoy: "TestNonStringKey (non_string_key.yaml)", files: []string{"number_key.yaml"}, refused: "unknown field", field: "1.5"},
	{envoy: "TestNonMapList (non_map_list.yaml)", files: []string{"scalar_list.yaml"}, refused: "must be a mapping", field: "descriptors[0]"},
	{envoy: "TestUnlimitedWithRateLimitUnit (unlimited_with_unit.yaml)", files: []string{"unlimited_unit.yaml"},
		refused: "must not be set when unlimited is true", field: "descriptors[0].rate_limit.unit"},
	{envoy: "TestShadowModeConfig (shadowmode_config.yaml)", files: []string{"shadow.yaml"}, lookups: []parityLookup{
		{"shadows", []string{"tenant", "acme", "route", "cart"}, "5/SECOND"},
		{"shadows", []string{"tenant", "acme", "route", "checkout"}, "10/SECOND shadow"},
		{"shadows", []string{"client", "anyone"}, "20/MINUTE shadow"},
		{"shadows", []string{"client", "partner"}, "30/MINUTE"},
	}},
	{envoy: "TestWildcardConfig (wildcard.yaml)", files: []string{"wildcards.yaml"}, lookups: []parityLookup{
		{"wild", []string{"any", "x1"}, "20/MINUTE"},
		{"wild", []string{"path", "img1"}, "20/MINUTE"},
		{"wild", []string{"path", "img"}, "20/MINUTE"}, // '*' matches nothing too
		{"wild", []string{"outer", "o1", "path", "doc9"}, "20/MINUTE"},
		{"wild", []string{"path", "bar"}, "none"},
		{"wild", []string{"exact", "img1"}, "none"}, // no wildcard: no prefix match
		{"wild", []string{"mid", "vaz"}, "20/MINUTE"},
		{"wild", []string{"mid", "v123z"}, "20/MINUTE"},
		{"wild", []string{"mid", "vz"}, "20/MINUTE"},
		{"wild", []string{"mid", "va"}, "none"},
		{"wild", []string{"mid", "xvz"}, "none"},
		{"wild", []string{"multi", "a1b2c"}, "10/MINUTE"},
		{"wild", []string{"multi", "abc"}, "10/MINUTE"},
		{"wild", []string{"multi", "a1c"}, "none"},
		{"wild", []string{"multi", "b2c"}, "none"},
	}},
	{envoy: "TestShareThreshold (share_threshold.yaml)", files: []string{"shared.yaml"}, lookups: []parityLookup{
		{"shared", []string{"file", "pub/a.pdf"}, "10/HOUR"},
		{"shared", []string{"name", "one"}, "50/MINUTE"}, // an exact value wins over a shared wildcard
		{"shared", []string{"name", "other"}, "100/MINUTE"},
		{"shared", []string{"route", "api/v1", "method", "GET"}, "60/MINUTE"},
	}},
	{envoy: "TestShareThreshold (share_threshold without '*')", files: []string{"shared_no_wildcard.yaml"},
		refused: "only applies to a wildcard value", field: "descriptors[0].share_threshold"},
	{envoy: "TestMetadata (metadata.yaml)", files: []string{"metadata.yaml"}, lookups: []parityLookup{
		{"meta", []string{"tenant", "acme", "route", "cart"}, "5/SECOND metadata=map[owner:team_1]"},
		{"meta", []string{"tenant", "acme", "route", "checkout"}, "10/SECOND"},
		{"meta", []string{"client", "c"}, "20/MINUTE metadata=map[billing:map[owner:team_2 tags:[a b] tier:3]]"},
	}},
	{envoy: "YamlRateLimit without requests_per_unit (envoy: 0, refuse all)", files: []string{"no_requests.yaml"},
		refused: "required", field: "descriptors[0].rate_limit.requests_per_unit",
		differs: "a missing requests_per_unit is more likely a mistake than a block"},
	{envoy: "validKeys: name on a descriptor (envoy: ignored)", files: []string{"descriptor_name.yaml"},
		refused: "must be 1–128 characters", field: "descriptors[0].name",
		differs: "a descriptor's name is sluice's rule name, used in metrics, stream names and URLs"},
	{envoy: "validKeys: quota_mode", files: []string{"quota.yaml"}, lookups: []parityLookup{
		{"quotas", []string{"storage", "s"}, "3/DAY quota"},
		{"quotas", []string{"calls", "c"}, "2/DAY"},
	}},
}

// parityDescribe renders the limit a descriptor gets, in parityLookup's terms.
func parityDescribe(set *Set, domain string, kv []string) string {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	m, ok := set.Match(domain, es)
	if !ok {
		return "none"
	}
	r := m.Rule
	if r.Unlimited {
		return "unlimited"
	}
	if len(r.RateLimits) == 0 {
		return "none"
	}
	l := r.RateLimits[0]
	unit := map[time.Duration]string{time.Second: "SECOND", time.Minute: "MINUTE", time.Hour: "HOUR", 24 * time.Hour: "DAY"}[l.Rate.Interval]
	s := fmt.Sprintf("%d/%s", l.Rate.Requests, unit)
	if l.Name != "" {
		s += " name=" + l.Name
	}
	if r.ShadowMode {
		s += " shadow"
	}
	if r.QuotaMode {
		s += " quota"
	}
	if r.DetailedMetric {
		s += " detailed"
	}
	if r.Metadata != nil {
		s += fmt.Sprintf(" metadata=%v", r.Metadata)
	}
	return s
}

func TestEnvoyParityConfig(t *testing.T) {
	t.Parallel()
	cases, lookups, differs := 0, 0, 0
	for _, c := range parityConfigCases {
		t.Run(c.envoy, func(t *testing.T) {
			var paths []string
			for _, f := range c.files {
				paths = append(paths, filepath.Join("testdata", "envoyparity", f))
			}
			set, err := LoadWith(Options{MergeDomains: c.merge}, paths...)
			if c.refused != "" {
				var ve ValidationErrors
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("loaded, or refused for another reason: %v; want %q", err, c.refused)
				}
				if c.field != "" && (!errors.As(err, &ve) || ve[0].Field != c.field) {
					t.Fatalf("refusal %v names field %q, want %q", err, fieldOf(ve), c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range c.lookups {
				if got := parityDescribe(set, l.domain, l.kv); got != l.want {
					t.Errorf("%s %v: %s, want %s", l.domain, l.kv, got, l.want)
				}
			}
		})
		cases++
		lookups += len(c.lookups)
		if c.differs != "" {
			differs++
		}
	}
	t.Logf("envoy parity, configuration: %d cases (%d as envoy, %d deliberately different), %d lookups", cases, cases-differs, differs, lookups)
}

func fieldOf(ve ValidationErrors) string {
	if len(ve) == 0 {
		return ""
	}
	return ve[0].Field
}

// Values a share_threshold wildcard matches share one counter (one Key); without it
// each value counts apart. Envoy's TestShareThreshold asserts the same through its
// stats keys and its integration test through counts (internal/ingress).
func TestEnvoyParitySharedKeys(t *testing.T) {
	t.Parallel()
	set, err := Load(filepath.Join("testdata", "envoyparity", "shared.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(kv ...string) string {
		var es []Entry
		for i := 0; i+1 < len(kv); i += 2 {
			es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
		}
		m, ok := set.Match("shared", es)
		if !ok {
			t.Fatalf("%v matched nothing", kv)
		}
		return m.Rule.Name + "|" + m.Key
	}
	if a, b := key("file", "pub/a.pdf"), key("file", "pub/b.csv"); a != b {
		t.Errorf("shared wildcard: %q and %q differ", a, b)
	}
	if a, b := key("file_apart", "pub/a.pdf"), key("file_apart", "pub/b.csv"); a == b {
		t.Errorf("wildcard without share_threshold: both %q", a)
	}
	if a, b := key("route", "api/v1", "method", "GET"), key("route", "api/v2", "method", "GET"); a != b {
		t.Errorf("shared parent wildcard: %q and %q differ", a, b)
	}
}

// Metadata keeps YAML's scalar types as JSON ones and refuses what JSON cannot carry.
func TestMetadataValues(t *testing.T) {
	t.Parallel()
	set, err := Parse("m.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {s: text, i: 3, f: 1.5, b: true, n: null, l: [1, x], 7: seven, m: {deep: {er: 1}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := set.Match("d", []Entry{{Key: "k", Value: "v"}})
	want := map[string]any{"s": "text", "i": int64(3), "f": 1.5, "b": true, "n": nil, "l": []any{int64(1), "x"}, "7": "seven",
		"m": map[string]any{"deep": map[string]any{"er": int64(1)}}}
	if !reflect.DeepEqual(m.Rule.Metadata, want) {
		t.Errorf("metadata %#v\nwant %#v", m.Rule.Metadata, want)
	}
	for body, field := range map[string]string{
		"metadata: [a, b]":         "descriptors[0].metadata",
		"metadata: {x: .nan}":      "descriptors[0].metadata.x",
		"metadata: {x: [1, .inf]}": "descriptors[0].metadata.x[1]",
		"all_or_nothing: maybe":    "descriptors[0].all_or_nothing",
		"quota_mode: 2":            "descriptors[0].quota_mode",
	} {
		_, err := Parse("m.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    "+body+"\n"))
		var ve ValidationErrors
		if !errors.As(err, &ve) || ve[0].Field != field {
			t.Errorf("%s: %v, want a refusal naming %s", body, err, field)
		}
	}
	if _, err := Parse("m.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    all_or_nothing: true\n")); err == nil ||
		!strings.Contains(err.Error(), "all_or_nothing: only applies to a descriptor with rate_limit") {
		t.Errorf("all_or_nothing without a limit: %v", err)
	}
}

// -check-config takes the same list as -rules, and -merge-domain-config.
func TestCheckConfigListAndMerge(t *testing.T) {
	t.Parallel()
	a := filepath.Join("testdata", "envoyparity", "merge_a.yaml")
	b := filepath.Join("testdata", "envoyparity", "merge_b.yaml")
	var out strings.Builder
	if err := CheckConfigWith(&out, Options{MergeDomains: true}, a, b); err != nil ||
		!strings.Contains(out.String(), "rules: OK: 2 rules (0 queue rules, 2 check-only rules) in 1 domains from 2 files") {
		t.Fatalf("merged: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := CheckConfigWith(&out, Options{}, a, b); err == nil || !strings.Contains(out.String(), `duplicate domain "split"`) {
		t.Fatalf("not merged: %v\n%s", err, out.String())
	}
}
