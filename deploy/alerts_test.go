package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// promtool finds Prometheus's promtool: SLUICE_PROMTOOL, the PATH, or installed by
// scripts/ensure-promtool.sh (Debian's prometheus package, as root). The test is skipped
// only when it cannot be installed, and says why.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	out, err := exec.Command("../scripts/ensure-promtool.sh").CombinedOutput()
	if p, lerr := exec.LookPath("promtool"); lerr == nil {
		return p
	}
	t.Skipf("promtool is not installed and scripts/ensure-promtool.sh could not install it (%v): %s", err, strings.TrimSpace(string(out)))
	return ""
}

// TestAlertRules: the alert rules are valid (promtool check rules) and behave as their unit
// tests say (promtool test rules): each alert fires on its condition after its `for`, and
// not on the neighbouring healthy case.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesShape: every alert has a severity and the annotations an on-call reads
// (summary, description, runbook), has a unit test, and queries only metrics that
// docs/metrics.md documents.
func TestAlertRulesShape(t *testing.T) {
	t.Parallel()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeFile(t, filepath.Join("prometheus", "alerts.yml"), &f)
	tests, err := os.ReadFile(filepath.Join("prometheus", "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"SluiceQueueTooOld", "SluiceDeadLetterRateHigh", "SluiceSinkErrorRatioHigh",
		"SluiceJetStreamStoreNearlyFull", "SluiceDrainersMissing", "SluiceBreakerOpen"}
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s: no unit test in alerts_test.yml", r.Alert)
			}
			if !strings.Contains(string(docs), "`"+r.Alert+"`") {
				t.Errorf("%s: not in docs/metrics.md's Alerts table", r.Alert)
			}
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				if !strings.Contains(string(docs), "`"+m+"`") && !strings.Contains(string(docs), "`"+m+"{") {
					t.Errorf("%s queries %s, which docs/metrics.md does not list", r.Alert, m)
				}
			}
		}
	}
	for _, a := range want {
		if !seen[a] {
			t.Errorf("alerts.yml has no %s", a)
		}
	}
}
