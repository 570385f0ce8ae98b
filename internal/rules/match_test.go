package rules

import (
	"reflect"
	"strings"
	"testing"
)

const matchConfig = `
domain: edge
descriptors:
  - key: remote_address                 # default: one bucket per address
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: remote_address
    value: "10.1.*"                     # declared first: wins over 10.*
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: authenticated
    value: "false"
    descriptors:
      - key: path
        value: /api/*
        rate_limit: {unit: minute, requests_per_unit: 60}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: k1
    descriptors:
      - key: k2
        descriptors:
          - key: k3
            value: v3
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: glob
    value: "a*b*c"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: shared
    value: "tenant-*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: parent
    value: p
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: child
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value: admin
    descriptors:
      - key: action
        value: delete
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 1}
---
domain: other
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1}
`

func e(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestMatchEnvoySemantics(t *testing.T) {
	t.Parallel()
	s := mustParse(t, matchConfig)
	tests := []struct {
		name     string
		domain   string
		entries  []Entry
		wantRule string // "" = no match
		wantKey  string
	}{
		{"key only", "edge", e("remote_address", "1.2.3.4"), "edge_remote_address", "1.2.3.4"},
		{"exact beats wildcard and key only", "edge", e("remote_address", "10.0.0.1"), "edge_remote_address_10_0_0_1", ""},
		{"first declared wildcard wins", "edge", e("remote_address", "10.1.2.3"), "edge_remote_address_10_1__", "10.1.2.3"},
		{"other wildcard", "edge", e("remote_address", "10.2.0.0"), "edge_remote_address_10__", "10.2.0.0"},
		{"wildcard prefix only", "edge", e("remote_address", "110.0.0.1"), "edge_remote_address", "110.0.0.1"},
		{"domain scopes rules", "other", e("remote_address", "10.0.0.1"), "other_remote_address", "10.0.0.1"},
		{"nested wildcard", "edge", e("authenticated", "false", "path", "/api/users"), "edge_authenticated_false_path__api__", "/api/users"},
		{"nested key only", "edge", e("authenticated", "false", "path", "/login"), "edge_authenticated_false_path", "/login"},
		{"unknown value at exact-only level", "edge", e("authenticated", "true", "path", "/api/x"), "", ""},
		{"descriptor shorter than config", "edge", e("authenticated", "false"), "", ""},
		{"descriptor longer than config", "edge", e("authenticated", "false", "path", "/api/x", "x", "y"), "", ""},
		{"longer than a leaf rule", "edge", e("remote_address", "1.2.3.4", "path", "/"), "", ""},
		{"two varying levels", "edge", e("k1", "a", "k2", "b", "k3", "v3"), "edge_k1_k2_k3_v3", "1:a1:b"},
		{"exact leaf mismatch", "edge", e("k1", "a", "k2", "b", "k3", "v4"), "", ""},
		{"glob middle", "edge", e("glob", "aXXbYYc"), "edge_glob_a_b_c", "aXXbYYc"},
		{"glob minimal", "edge", e("glob", "abc"), "edge_glob_a_b_c", "abc"},
		{"glob order matters", "edge", e("glob", "acb"), "", ""},
		{"glob needs suffix", "edge", e("glob", "ab"), "", ""},
		{"share_threshold: one bucket", "edge", e("shared", "tenant-7"), "edge_shared_tenant-_", ""},
		{"limit at intermediate node", "edge", e("parent", "p"), "edge_parent_p", ""},
		{"child of limited node", "edge", e("parent", "p", "child", "c"), "edge_parent_p_child", "c"},
		{"no backtracking from exact", "edge", e("user", "admin", "action", "read"), "", ""},
		{"exact path", "edge", e("user", "admin", "action", "delete"), "edge_user_admin_action_delete", ""},
		{"key-only path", "edge", e("user", "bob", "action", "read"), "edge_user_action", "3:bob4:read"},
		{"unknown key", "edge", e("nope", "x"), "", ""},
		{"unknown domain", "nope", e("remote_address", "x"), "", ""},
		{"no entries", "edge", nil, "", ""},
	}
	for _, tt := range tests {
		m, ok := s.Match(tt.domain, tt.entries)
		switch {
		case tt.wantRule == "" && ok:
			t.Errorf("%s: matched %s, want no match", tt.name, m.Rule.Name)
		case tt.wantRule != "" && !ok:
			t.Errorf("%s: no match, want %s", tt.name, tt.wantRule)
		case ok && (m.Rule.Name != tt.wantRule || m.Key != tt.wantKey):
			t.Errorf("%s: got %s %q, want %s %q", tt.name, m.Rule.Name, m.Key, tt.wantRule, tt.wantKey)
		}
	}
	var nilSet *Set
	if _, ok := nilSet.Match("edge", e("remote_address", "x")); ok {
		t.Error("nil set matched")
	}
	if _, ok := (&Set{}).Match("edge", e("remote_address", "x")); ok {
		t.Error("zero set matched")
	}
}

// Keys are data: whatever the bytes, a single varying level gives the value verbatim.
func TestMatchKeyIsVerbatim(t *testing.T) {
	t.Parallel()
	s := mustParse(t, matchConfig)
	for _, v := range []string{"m-42", "a.b.c", "*", ">", "a b", "orders.>", "😀 emoji", "", "ünïcødé",
		strings.Repeat("x", 256), "10.1.*", "1:a", "\x00\xff"} {
		m, ok := s.Match("other", e("remote_address", v))
		if !ok || m.Key != v {
			t.Errorf("%q: got %q %v", v, m.Key, ok)
		}
	}
}

func TestEncodeKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"m-42"}, "m-42"},
		{[]string{""}, ""},
		{[]string{"a", "b"}, "1:a1:b"},
		{[]string{"", ""}, "0:0:"},
		{[]string{"a:b", "c"}, "3:a:b1:c"},
		{[]string{"😀", "x y", "."}, "4:😀3:x y1:."},
		{[]string{strings.Repeat("z", 12), "*"}, "12:" + strings.Repeat("z", 12) + "1:*"},
	}
	for _, tt := range tests {
		got := EncodeKey(tt.in...)
		if got != tt.want {
			t.Errorf("EncodeKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := DecodeKey(got, len(tt.in))
		if err != nil || (len(tt.in) > 0 && !reflect.DeepEqual(back, tt.in)) {
			t.Errorf("DecodeKey(%q, %d) = %q, %v", got, len(tt.in), back, err)
		}
	}
	// Tuples that naive joining would confuse.
	collide := [][]string{
		{"a", "bc"}, {"ab", "c"}, {"a.b", "c"}, {"a", "b.c"}, {"1:a", ""}, {"", "1:a"},
		{"1:a1:b", ""}, {"", "1:a1:b"}, {"", ""}, {"0:", ""}, {"", "0:"},
	}
	seen := map[string][]string{}
	for _, tup := range collide {
		k := EncodeKey(tup...)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q both encode to %q", prev, tup, k)
		}
		seen[k] = tup
	}
	for _, bad := range []struct {
		key string
		n   int
	}{{"x", 2}, {"1:a", 2}, {"1:a1:b1:c", 2}, {"01:a1:b", 2}, {"9:a1:b", 2}, {":a", 2}, {"x", 0}, {"", -1}} {
		if _, err := DecodeKey(bad.key, bad.n); err == nil {
			t.Errorf("DecodeKey(%q, %d): no error", bad.key, bad.n)
		}
	}
}

const checkConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true, replaces: [{name: per-path}]}
  - key: remote_address
    value: 10.0.0.66
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    name: per-path
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: client_id
    value: scraper*
    descriptors:
      - key: banned
        value: "true"
        rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: override
        rate_limit:
          name: override_limit
          replaces: [{name: banned_limit}]
          unit: minute
          requests_per_unit: 2
`

func TestCheck(t *testing.T) {
	t.Parallel()
	s := mustParse(t, checkConfig)
	banned := e("client_id", "scraper-1", "banned", "true")
	override := e("source_cluster", "proxy", "destination_cluster", "override")
	type want struct {
		rule               string
		applies, replaced  bool
		unlimited, shadows bool
	}
	tests := []struct {
		name string
		in   [][]Entry
		want []want
	}{
		{"plain", [][]Entry{e("remote_address", "1.2.3.4")}, []want{{rule: "edge_remote_address", applies: true}}},
		{"no match is OK and not applied", [][]Entry{e("nope", "x")}, []want{{}}},
		{"unlimited", [][]Entry{e("remote_address", "10.0.0.1")}, []want{{rule: "edge_remote_address_10_0_0_1", unlimited: true}}},
		{"shadow mode applies but never denies", [][]Entry{e("remote_address", "10.0.0.66")},
			[]want{{rule: "edge_remote_address_10_0_0_66", applies: true, shadows: true}}},
		{"banned alone", [][]Entry{banned}, []want{{rule: "edge_client_id_scraper__banned_true", applies: true}}},
		{"override replaces banned (by limit name)", [][]Entry{banned, override}, []want{
			{rule: "edge_client_id_scraper__banned_true", replaced: true},
			{rule: "edge_source_cluster_proxy_destination_cluster_override", applies: true}}},
		{"order does not matter", [][]Entry{override, banned}, []want{
			{rule: "edge_source_cluster_proxy_destination_cluster_override", applies: true},
			{rule: "edge_client_id_scraper__banned_true", replaced: true}}},
		{"unlimited rule replaces by rule name", [][]Entry{e("path", "/x"), e("remote_address", "10.0.0.1")}, []want{
			{rule: "per-path", replaced: true},
			{rule: "edge_remote_address_10_0_0_1", unlimited: true}}},
	}
	for _, tt := range tests {
		got := s.Check("edge", tt.in)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %d results", tt.name, len(got))
		}
		for i, g := range got {
			w := tt.want[i]
			name := ""
			if g.Rule != nil {
				name = g.Rule.Name
			}
			gw := want{rule: name, applies: g.Applies(), replaced: g.Replaced}
			if g.Rule != nil {
				gw.unlimited, gw.shadows = g.Rule.Unlimited, g.Rule.ShadowMode
			}
			if gw != w {
				t.Errorf("%s [%d]: got %+v want %+v", tt.name, i, gw, w)
			}
		}
	}
}

func TestSetAccessors(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
domain: a
descriptors:
  - key: q
    queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}
    sink: {nats_subject: out}
  - key: l
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	if got := names(s); !reflect.DeepEqual(got, []string{"a_q", "a_l"}) {
		t.Errorf("Rules: %v", got)
	}
	if q := s.QueueRules(); len(q) != 1 || q[0].Name != "a_q" {
		t.Errorf("QueueRules: %v", q)
	}
	if s.Rule("a_l") == nil || s.Rule("nope") != nil {
		t.Error("Rule lookup")
	}
	rs := s.Rules()
	rs[0] = nil
	if s.Rules()[0] == nil {
		t.Error("Rules returned the internal slice")
	}
	var nilSet *Set
	if nilSet.Rule("x") != nil || nilSet.Rules() != nil || nilSet.QueueRules() != nil || nilSet.Domains() != nil {
		t.Error("nil set accessors")
	}
}

func BenchmarkMatch(b *testing.B) {
	s := mustParse(b, matchConfig+`
---
domain: orders
descriptors:
  - key: merchant_id
    queue: {capacity: 100, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:8090/sink/orders"}
`)
	cases := []struct {
		name    string
		domain  string
		entries []Entry
	}{
		{"one_level_key_only", "orders", e("merchant_id", "m-42")},
		{"one_level_exact", "edge", e("remote_address", "10.0.0.1")},
		{"one_level_wildcard", "edge", e("remote_address", "10.2.3.4")},
		{"two_levels_wildcard", "edge", e("authenticated", "false", "path", "/api/users/42")},
		{"three_levels_two_vary", "edge", e("k1", "tenant-a", "k2", "user-42", "k3", "v3")},
		{"no_match", "edge", e("nope", "x")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Match(c.domain, c.entries)
			}
		})
	}
}

func BenchmarkCheck(b *testing.B) {
	s := mustParse(b, checkConfig)
	in := [][]Entry{
		e("remote_address", "1.2.3.4"),
		e("client_id", "scraper-1", "banned", "true"),
		e("source_cluster", "proxy", "destination_cluster", "override"),
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Check("edge", in)
	}
}
