// Command sluice is the command line for people who run sluice: operator verbs over an
// ingress's admin API (queues, tune, purge, dead letters, replay, …), `check` for rules
// files, and `dev`, the whole system in one process (internal/devstack). Run `sluice help`;
// see internal/cli for the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // rules' time_zone works without zoneinfo

	"github.com/sluice-io/sluice/internal/cli"
	"github.com/sluice-io/sluice/internal/devstack"
	"github.com/sluice-io/sluice/internal/process"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := &cli.Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	m.Dev = func(ctx context.Context, args []string) int {
		return process.ExitCode("sluice dev", devstack.Run(ctx, args, os.Getenv, os.Stdout, os.Stderr), os.Stderr)
	}
	code := m.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
