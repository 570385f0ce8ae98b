package rules

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics, and returns either an error or a Set whose every
// rule re-validates, is reachable by name, and — when its path has only exact values —
// is what Match returns for that path.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{matchConfig, checkConfig, "", "---\n", "domain: x\n",
		"domain: x\ndescriptors: [{key: a, value: 'b*', rate_limit: [{unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 2}]}]\n",
		"domain: x\ndescriptors: [{key: a, queue: {capacity: 1, outflow: {interval: 1s, requests_per_unit: 1}}, sink: {url: 'http://h/'}, overflow: park}]\n",
		"domain: x\ndescriptors: [{key: a, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 10}}, sink: {url: 'http://h/', breaker: {failures: 5, min_keys: 2, within: 5s}}, delivery: {spacing: strict, window: {days: [mon-fri], from: '22:00', to: '06:00', time_zone: Asia/Seoul}, adaptive: {decrease: 0.5, min_outflow: {unit: second, requests_per_unit: 1}}}}]\n",
		"domain: x\ndescriptors: [{key: a, queue: {capacity: 1, outflow: {unit: second, requests_per_unit: 1}}, sink: {url: 'http://h/'}, delivery: {window: {from: '08:00', to: '21:00', time_zone: from_message, default_time_zone: Europe/Berlin}}}]\n",
		"a: &a [*a]\n", "domain: &d x\ndescriptors: [{key: *d}]\n",
	} {
		f.Add([]byte(seed))
	}
	if files, err := filepath.Glob("../../deploy/examples/*.yaml"); err == nil {
		for _, p := range files {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			if s != nil {
				t.Fatal("Set returned with an error")
			}
			return
		}
		for _, r := range s.Rules() {
			if err := r.Validate(); err != nil {
				t.Fatalf("rule does not re-validate: %v", err)
			}
			if s.Rule(r.Name) != r {
				t.Fatalf("rule %q not found by name", r.Name)
			}
			if r.KeyLevels() > len(r.Path) {
				t.Fatalf("rule %q: %d key levels for a path of %d", r.Name, r.KeyLevels(), len(r.Path))
			}
			exact := true
			entries := make([]Entry, len(r.Path))
			for i, p := range r.Path {
				entries[i] = Entry{Key: p.Key, Value: p.Value}
				exact = exact && p.Value != "" && !containsWildcard(p.Value)
			}
			if exact {
				if m, ok := s.Match(r.Domain, entries); !ok || m.Rule != r || m.Key != "" {
					t.Fatalf("rule %q: Match of its own exact path = %+v, %v", r.Name, m, ok)
				}
			}
		}
	})
}

func containsWildcard(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '*' {
			return true
		}
	}
	return false
}

// FuzzMatchKey: within one rule, distinct value tuples always give distinct Keys, and
// equal tuples equal Keys; EncodeKey/DecodeKey round-trip.
func FuzzMatchKey(f *testing.F) {
	s, err := Parse("fuzz.yaml", []byte(`
domain: d
descriptors:
  - key: one
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        value: "x*"
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 1}
`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("a", "xb", "c", "a", "xb", "d")
	f.Add("a", "xbc", "", "ab", "xc", "")
	f.Add("1:a", "x", "", "", "x1:a", "")
	f.Add("😀", "x.*>", " ", "😀", "x.*>", " ")
	f.Fuzz(func(t *testing.T, a1, b1, c1, a2, b2, c2 string) {
		m1, ok1 := s.Match("d", []Entry{{"a", a1}, {"b", "x" + b1}, {"c", c1}})
		m2, ok2 := s.Match("d", []Entry{{"a", a2}, {"b", "x" + b2}, {"c", c2}})
		if !ok1 || !ok2 || m1.Rule != m2.Rule {
			t.Fatalf("no match: %v %v", ok1, ok2)
		}
		same := a1 == a2 && b1 == b2 && c1 == c2
		if same != (m1.Key == m2.Key) {
			t.Fatalf("tuples (%q %q %q) and (%q %q %q): keys %q and %q", a1, b1, c1, a2, b2, c2, m1.Key, m2.Key)
		}
		vals, err := DecodeKey(m1.Key, m1.Rule.KeyLevels())
		if err != nil || len(vals) != 3 || vals[0] != a1 || vals[1] != "x"+b1 || vals[2] != c1 {
			t.Fatalf("DecodeKey(%q) = %q, %v", m1.Key, vals, err)
		}
		// One varying level: the Key is the value itself.
		if m, ok := s.Match("d", []Entry{{"one", a1}}); !ok || m.Key != a1 {
			t.Fatalf("single level %q → %q", a1, m.Key)
		}
		if (a1 != a2) != (EncodeKey(a1) != EncodeKey(a2)) {
			t.Fatal("single-value EncodeKey not injective")
		}
	})
}
