package ingress_test

import (
	"strings"
	"testing"
)

// A check no rule matches is OK, as envoy answers it — and counted, so that a caller whose
// domain is misspelt (everything let through) shows up in the metrics.
func TestUnmatchedChecksAreCounted(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for range 3 {
		if r := e.do("POST", "/v1/check", `{"domain":"autj","descriptors":[{"entries":[{"key":"auth_type","value":"login"}]}]}`); r.code != 200 || r.body["overall_code"] != "OK" {
			t.Fatalf("unmatched check: %d %s", r.code, r.raw)
		}
	}
	m := e.do("GET", "/metrics", "")
	if want := `sluice_checks_total{code="OK",rule="_unmatched",transport="http"} 3`; !strings.Contains(m.raw, want) {
		t.Fatalf("/metrics lacks %s:\n%s", want, grep(m.raw, "sluice_checks_total"))
	}
}
