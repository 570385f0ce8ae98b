package ingress_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
)

// TestCheckConfigPrintsOnce: `ingress -check-config` with a bad file writes each problem
// once (it used to be repeated on stderr after the list) and exits 2; a good file prints
// the table, burst and time_zone included, and exits 0.
func TestCheckConfigPrintsOnce(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := process.ExitCode("ingress", ingress.Run(context.Background(), []string{"-check-config", bad}, func(string) string { return "" }, &stdout, &stderr), &stderr)
	all := stdout.String() + stderr.String()
	problem := `descriptors[0].rate_limit.unit: must be second, minute, hour, day, week, month or year (got "sec")`
	if code != 2 || strings.Count(all, problem) != 1 || !strings.HasPrefix(stdout.String(), "rules: 1 problem(s):\n") {
		t.Errorf("exit %d; the problem %d times in:\n%s", code, strings.Count(all, problem), all)
	}

	stdout.Reset()
	stderr.Reset()
	missing := filepath.Join(dir, "missing.yaml")
	code = process.ExitCode("ingress", ingress.Run(context.Background(), []string{"-check-config", missing}, func(string) string { return "" }, &stdout, &stderr), &stderr)
	all = stdout.String() + stderr.String()
	if code != 2 || strings.Count(all, "missing.yaml") != 1 {
		t.Errorf("missing file: exit %d, output:\n%s", code, all)
	}

	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(`domain: x
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 100, time_zone: Asia/Seoul}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	code = process.ExitCode("ingress", ingress.Run(context.Background(), []string{"-check-config", good}, func(string) string { return "" }, &stdout, &stderr), &stderr)
	if code != 0 || stderr.Len() != 0 ||
		!strings.Contains(stdout.String(), "limit 5/1s token_bucket burst=20") ||
		!strings.Contains(stdout.String(), "limit 100/24h0m0s fixed_window time_zone=Asia/Seoul") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}
