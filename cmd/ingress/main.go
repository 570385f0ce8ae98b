// Command ingress is sluice's front door: the HTTP API that admits messages into per-key
// queues and answers rate-limit checks. With -dev it is the whole system in one process.
// See README.md for flags and ../shared/API.md for the API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // rules' time_zone works in a container without zoneinfo

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/rules"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ingress:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	cfg, err := ingress.ParseFlags(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	if len(cfg.CheckConfig) > 0 {
		return rules.CheckConfigWith(os.Stdout, rules.Options{MergeDomains: cfg.MergeDomainConfig}, cfg.CheckConfig...)
	}
	m := &ingress.Main{Config: cfg}
	if err := m.Run(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	m.Logger.Info("ingress: shutting down", "timeout", cfg.ShutdownTimeout.String())
	m.Close()
	return nil
}
