package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/process"
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
	runOffline(&cli.Main{}, "help", "purge").must(t, 0, "--yes", "")
	runOffline(&cli.Main{}, "purge", "-h").must(t, 0, "--yes", "")
	runOffline(&cli.Main{}, "purge", "--help").must(t, 0, "--yes", "")
	runOffline(&cli.Main{}, "-h").must(t, 0, "Exit codes:", "")
	runOffline(&cli.Main{}, "--help").must(t, 0, "Exit codes:", "")
	runOffline(&cli.Main{}).must(t, 2, "", "Usage:")

	// A verb's help spells its flags as docs/cli.md and the top-level help do: --delay,
	// -o; and its usage line names every flag of the verb.
	r = runOffline(&cli.Main{}, "help", "submit").must(t, 0, "  --delay duration\n", "")
	usage, _, _ := strings.Cut(r.stdout, "\n")
	for _, f := range []string{"--payload", "--idempotency-key", "--delay", "--deliver-at", "--ttl", "--header"} {
		if !strings.Contains(usage, f) {
			t.Errorf("submit's usage line lacks %s: %s", f, usage)
		}
		if !strings.Contains(r.stdout, "\n  "+f+" ") {
			t.Errorf("sluice help submit does not list %s:\n%s", f, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "\n  -o table|json\n") || strings.Contains(r.stdout, "\n  -delay") || strings.Contains(r.stdout, "\n  -url") {
		t.Errorf("sluice help submit, want --long and -o:\n%s", r.stdout)
	}

	// --version and -version are the version verb, as the ingress's -version.
	for _, v := range []string{"version", "--version", "-version"} {
		runOffline(&cli.Main{}, v).must(t, 0, "sluice ", "")
	}

	// main wires the dev stack in with one assignment; the dev command gets its own arguments.
	var got []string
	m := &cli.Main{Dev: func(_ context.Context, args []string) int { got = args; return 7 }}
	runOffline(m, "dev", "-http", ":0").must(t, 7, "", "")
	if strings.Join(got, " ") != "-http :0" {
		t.Fatalf("dev got %q", got)
	}

	// `sluice help dev` and `sluice dev -h` list dev's flags and exit 0; -h starts nothing.
	got = nil
	m.DevFlags = []process.Flag{{Name: "nats-addr", Env: "SLUICE_DEV_NATS_ADDR", Default: "127.0.0.1:4222", Usage: "listen address of the embedded NATS server"}}
	for _, args := range [][]string{{"help", "dev"}, {"dev", "-h"}, {"dev", "-data", "x", "--help"}} {
		runOffline(m, args...).must(t, 0, "  --nats-addr\n        listen address of the embedded NATS server (env SLUICE_DEV_NATS_ADDR; default 127.0.0.1:4222)", "")
	}
	if got != nil {
		t.Fatalf("dev -h ran the dev stack with %q", got)
	}
}

// Off a terminal — stdin /dev/null, as under cron, CI or systemd — purge refuses without
// --yes (exit 2) before it asks or reads anything. /dev/null is a character device, not a
// terminal.
func TestPurgeOffTerminal(t *testing.T) {
	t.Parallel()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	m := &cli.Main{Stdin: devNull, Getenv: func(k string) string {
		if k == "SLUICE_URL" {
			return "http://127.0.0.1:1" // nothing listens: asking would first read the queue
		}
		return ""
	}}
	r := runOffline(m, "purge", "orders", "--key", "k").must(t, 2, "", "add --yes")
	if strings.Contains(r.stderr, "[y/N]") {
		t.Fatalf("purge asked off a terminal:\n%s", r.stderr)
	}
}

// docs/cli.md (the README's "Command line" section until the README became a tour) documents
// every verb and every exit code, so the two cannot drift apart.
func TestREADMEDocumentsEveryVerb(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)
	if !strings.HasPrefix(section, "# Command line\n") {
		t.Fatal("docs/cli.md does not begin with \"# Command line\"")
	}
	for _, v := range cli.Verbs() {
		if v == "help" || v == "version" {
			continue
		}
		if !strings.Contains(section, "`"+v+"`") {
			t.Errorf("docs/cli.md does not document %q", v)
		}
	}
	for _, code := range []string{"| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |"} {
		if !strings.Contains(section, code) {
			t.Errorf("docs/cli.md's exit codes lack %q", code)
		}
	}
}
