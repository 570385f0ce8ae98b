// Command sluice is the command line for people who run sluice: operator verbs over an
// ingress's admin API (queues, tune, purge, dead letters, replay, …), `check` for rules
// files, and `dev`, the dev stack. Run `sluice help`; see internal/cli for the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-io/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := &cli.Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	// m.Dev = process.Dev // the dev stack, once it is a package function (branch process)
	code := m.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
