// Command sluice is the command line for people who run sluice: operator verbs over an
// ingress's admin API (queues, tune, purge, dead letters, replay, …), `check` for rules
// files, and `dev`, the whole system in one process (internal/devstack). Run `sluice help`;
// see internal/cli for the exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	_ "time/tzdata" // rules' time_zone works without zoneinfo

	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/devstack"
	"github.com/sluice-io/sluice/internal/process"
)

func main() {
	ctx, stop := process.SignalContext() // a second Ctrl-C stops `sluice dev` at once
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run is the command with the process's streams and environment; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	m := &cli.Main{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: getenv, DevFlags: devstack.Flags()}
	m.Dev = func(ctx context.Context, args []string) int {
		return devExitCode(devstack.Run(ctx, args, getenv, stdout, stderr), stderr)
	}
	return m.Run(ctx, args)
}

// devExitCode is process.ExitCode for `sluice dev`; -help is not an error.
func devExitCode(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return process.ExitOK
	}
	return process.ExitCode("sluice dev", err, stderr)
}
