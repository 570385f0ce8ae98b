// Package examples_test builds the example programs and runs them against a whole sluice
// started in-process: the ingress (ingress.Main, with an in-process drainer and
// re-admitter, as `make run` has), a real NATS server, a real Redis and a recording sink,
// loaded with the rules of deploy/examples — the sinks replaced by the recording one.
package examples_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sinktest"
)

var examples = []string{"orders", "marketing", "login"}

// build compiles the examples into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, e := range examples {
		args = append(args, "./"+e)
	}
	cmd := exec.Command(goBin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

func TestExamplesBuild(t *testing.T) {
	t.Parallel()
	dir := build(t)
	for _, e := range examples {
		if _, err := os.Stat(filepath.Join(dir, e)); err != nil {
			t.Errorf("%s: %v", e, err)
		}
	}
}

// startSluice is `make run` in-process, with the recording sink in place of the demo sink.
func startSluice(t *testing.T) (base string, sink *sinktest.Sink) {
	t.Helper()
	sink = sinktest.Start(t)
	rulesDir := t.TempDir()
	files, err := filepath.Glob(filepath.Join("..", "deploy", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rules in deploy/examples: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("http://127.0.0.1:8090"), []byte(sink.URL))
		if err := os.WriteFile(filepath.Join(rulesDir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	cfg, err := ingress.ParseFlags([]string{"-rules", rulesDir, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-drain", "-status-keep", "1h", "-readmit-max-backoff", "2s", "-shutdown-timeout", "2s"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return "http://" + m.Addr.String(), sink
}

func TestExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS, Redis and an ingress")
	}
	t.Parallel()
	bin := build(t)
	base, sink := startSluice(t)

	run := func(t *testing.T, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), append([]string{"-url", base}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out.String(), errOut.String())
		}
		t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out.String())
		return out.String()
	}
	contains := func(t *testing.T, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("the output has no %q", w)
			}
		}
	}

	t.Run("orders", func(t *testing.T) {
		t.Parallel()
		out := run(t, "orders", "-merchants", "m-1,m-2", "-n", "5", "-burst", "0", "-timeout", "30s")
		contains(t, out, "m-1: 5 queued, 0 parked, 0 refused (429)", "m-2: 5 queued, 0 parked, 0 refused (429)",
			`policy "orders-per-merchant"`, "m-1: 5 delivered", "m-2: 5 delivered")
		n := 0
		for _, d := range sink.Accepted() {
			if d.Rule == "orders-per-merchant" {
				n++
			}
		}
		if n != 10 {
			t.Errorf("the sink accepted %d orders, want 10", n)
		}
	})
	// The default run: the first merchant gets more orders than its queue holds. About 15 s.
	t.Run("orders, full queue", func(t *testing.T) {
		if os.Getenv("SLUICE_EXAMPLES_FULL") == "" {
			t.Skip("SLUICE_EXAMPLES_FULL=1 runs orders with its defaults (120 orders for one merchant, about 15 s)")
		}
		t.Parallel()
		out := run(t, "orders", "-merchants", "big,small")
		// The queue starts draining during the burst: a few more than 100 fit.
		if !regexp.MustCompile(`big: 1[0-9][0-9] queued, [1-9][0-9]? parked, 0 refused \(429\)`).MatchString(out) {
			t.Error("the first merchant's queue did not overflow into parked orders")
		}
		contains(t, out, "small: 30 queued, 0 parked", "big: 120 delivered", "small: 30 delivered")
	})
	t.Run("marketing", func(t *testing.T) {
		t.Parallel()
		out := run(t, "marketing", "-n", "7", "-wait", "0")
		contains(t, out, "5 queued for today, 2 parked for the next window", "message 6: parked", "retry_at", "state parked")
	})
	t.Run("login", func(t *testing.T) {
		t.Parallel()
		out := run(t, "login")
		contains(t, out, "login 1: OK", "login 5: OK", "login 6: OVER_LIMIT", "Retry-After:")
		if strings.Contains(out, "login 6: OK") {
			t.Error("the 6th login of the minute passed")
		}
	})
}
