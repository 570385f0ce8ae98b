package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second `sluice dev` while the first holds its ports: the error names the command once.
func TestDevBusyPortNamedOnce(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"dev", "-rules", "../../deploy/examples", "-data", t.TempDir(),
		"-nats-addr", busy.Addr().String(), "-http", "127.0.0.1:0", "-grpc", "", "-sink-addr", "127.0.0.1:0"},
		nil, &out, &errOut, func(string) string { return "" })
	if code != 1 || !strings.Contains(errOut.String(), "address already in use") || strings.Count(errOut.String(), "sluice dev:") != 1 {
		t.Fatalf("exit %d (want 1), stderr:\n%s\nwant \"sluice dev:\" once and \"address already in use\"", code, errOut.String())
	}
}

// `sluice dev -h` is help, not an error: exit 0, whatever path reaches it.
func TestDevHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dev", "-h"}, {"help", "dev"}, {"dev", "--help"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errOut, func(string) string { return "" })
		if code != 0 || !strings.Contains(out.String(), "--shutdown-timeout") {
			t.Errorf("sluice %s: exit %d, stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
	}
}

// docs/configuration.md's "Ctrl-C again stops at once" (sluice dev): this test binary runs main as `sluice dev`
// in a child, with a sink that never answers and a message in delivery, so the soft stop
// of the first SIGINT waits for it (up to -shutdown-timeout, a minute here). The second
// SIGINT ends the process at once.
func TestDevSecondSignalStopsAtOnce(t *testing.T) {
	if args := os.Getenv("SLUICE_MAIN_CHILD_ARGS"); args != "" {
		os.Args = append([]string{"sluice"}, strings.Split(args, "\x1f")...)
		main()
		return
	}
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // never answers while the test runs
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer sink.Close()
	defer close(release)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(`domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "`+sink.URL+`/orders", timeout: 10m}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	args := []string{"dev", "-rules", rules, "-data", t.TempDir(), "-http", "127.0.0.1:0", "-grpc", "",
		"-nats-addr", "127.0.0.1:0", "-sink-addr", "127.0.0.1:0", "-shutdown-timeout", "1m"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDevSecondSignalStopsAtOnce$")
	cmd.Env = append(os.Environ(), "SLUICE_MAIN_CHILD_ARGS="+strings.Join(args, "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // banner and logs, one stream
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 1000)
	exited := make(chan error, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	wait := func(re *regexp.Regexp, within time.Duration) []string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("sluice dev exited before %q:\n%s", re, log.String())
				}
				log.WriteString(l + "\n")
				if m := re.FindStringSubmatch(l); m != nil {
					return m
				}
			case <-deadline:
				t.Fatalf("sluice dev did not say %q in %s:\n%s", re, within, log.String())
			}
		}
	}
	api := wait(regexp.MustCompile(`API:\s+(http://localhost:\d+)`), 30*time.Second)[1]

	resp, err := http.Post(api+"/v1/messages", "application/json",
		strings.NewReader(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %s", resp.Status)
	}
	select {
	case <-arrived: // the message is in delivery, and its sink will not answer
	case <-time.After(20 * time.Second):
		t.Fatal("the message never reached the sink")
	}

	cmd.Process.Signal(syscall.SIGINT)
	wait(regexp.MustCompile(`shutting down`), 10*time.Second)
	go func() { // keep reading, so the child never blocks on a full pipe
		for l := range lines {
			_ = l
		}
	}()
	select {
	case err := <-exited:
		t.Fatalf("sluice dev exited on the first SIGINT (%v): the test did not hold its soft stop", err)
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Fatalf("after the second SIGINT: %v, want the process ended by the signal", err)
		}
		t.Logf("exited %s after the second SIGINT", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("sluice dev still runs 10s after the second SIGINT (-shutdown-timeout 1m):\n%s", log.String())
	}
}
