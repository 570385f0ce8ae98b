package process_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/process"
)

// TestExecSecondSignalStopsAtOnce runs this test binary as a child whose RunFunc stops
// softly on SIGTERM with a stop that never finishes (a hung sink, say): the first SIGTERM
// starts the soft stop, the second ends the process at once — it is not caught any more.
func TestExecSecondSignalStopsAtOnce(t *testing.T) {
	if os.Getenv("SLUICE_EXEC_CHILD") == "1" {
		os.Exit(process.Exec("child", func(ctx context.Context, _ []string, _ func(string) string, stdout, _ io.Writer) error {
			io.WriteString(stdout, "running\n")
			return process.WaitForStop(ctx, slog.New(slog.NewTextHandler(stdout, nil)), "child", time.Minute, func() { select {} })
		}))
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecSecondSignalStopsAtOnce$")
	cmd.Env = append(os.Environ(), "SLUICE_EXEC_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	wait := func(what string) {
		for lines.Scan() {
			if strings.Contains(lines.Text(), what) {
				return
			}
		}
		t.Fatalf("the child never said %q", what)
	}
	wait("running")
	cmd.Process.Signal(syscall.SIGTERM)
	wait("child: shutting down") // the soft stop began, and hangs
	exited := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, out)
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		t.Fatalf("the child exited on the first signal: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Fatalf("after the second SIGTERM: %v, want the process ended by the signal", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the child still runs 10s after the second SIGTERM")
	}
}
