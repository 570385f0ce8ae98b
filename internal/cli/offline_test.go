package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/cli"
)

// runOffline runs a verb that needs no ingress.
func runOffline(m *cli.Main, args ...string) run {
	var out, errOut bytes.Buffer
	m.Stdout, m.Stderr = &out, &errOut
	code := m.Run(context.Background(), args)
	return run{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestCheckRulesOffline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("domain: login\ndescriptors:\n  - key: user\n    name: login\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"), 0o644)
	os.WriteFile(bad, []byte("domain: login\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: -3}\n"), 0o644)

	runOffline(&cli.Main{}, "check", good).must(t, 0, "rules: OK: 1 rules", "")
	r := runOffline(&cli.Main{}, "check", bad).must(t, 1, "", "problem(s)")
	if !strings.Contains(r.stderr, "bad.yaml:") {
		t.Fatalf("problems without their place:\n%s", r.stderr)
	}
	runOffline(&cli.Main{}, "check", good+","+bad).must(t, 1, "", "bad.yaml")
	runOffline(&cli.Main{}, "check").must(t, 2, "", "rules files")
}

func TestHelpAndDev(t *testing.T) {
	t.Parallel()
	r := runOffline(&cli.Main{}, "help").must(t, 0, "Exit codes:", "")
	for _, v := range []string{"queues", "queue NAME", "tune NAME", "pause", "resume", "purge", "keys", "dead", "replay", "status", "submit", "rules", "check", "dev"} {
		if !strings.Contains(r.stdout, "  "+v) {
			t.Errorf("help does not list %q", v)
		}
	}
	runOffline(&cli.Main{}, "help", "purge").must(t, 0, "-yes", "")
	runOffline(&cli.Main{}, "purge", "-h").must(t, 0, "-yes", "")
	runOffline(&cli.Main{}).must(t, 2, "", "Usage:")

	// main wires the dev stack in with one assignment; the dev command gets its own arguments.
	var got []string
	m := &cli.Main{Dev: func(_ context.Context, args []string) int { got = args; return 7 }}
	runOffline(m, "dev", "-http", ":0").must(t, 7, "", "")
	if strings.Join(got, " ") != "-http :0" {
		t.Fatalf("dev got %q", got)
	}
}

// The README's "Command line" section documents every verb and every exit code, so the
// two cannot drift apart.
func TestREADMEDocumentsEveryVerb(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Command line\n")
	if start < 0 {
		t.Fatal("README.md has no \"## Command line\" section")
	}
	section := readme[start:]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	for _, v := range cli.Verbs() {
		if v == "help" || v == "version" {
			continue
		}
		if !strings.Contains(section, "`"+v+"`") {
			t.Errorf("the README's Command line section does not document %q", v)
		}
	}
	for _, code := range []string{"| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"} {
		if !strings.Contains(section, code) {
			t.Errorf("the README's exit codes lack %q", code)
		}
	}
}
