// Command ingress is sluice's front door: the HTTP API that admits messages into per-key
// queues and answers rate-limit checks. With -dev it is the whole system in one process.
// See README.md for flags and api/openapi.yaml for the API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // rules' time_zone works in a container without zoneinfo

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// errReported is returned when the problem was already written for the user
// (-check-config lists every problem itself), so it is not printed a second time.
var errReported = errors.New("reported")

// exitCode prints err (unless it was reported already, or is -help's) and returns the
// process's exit code: 0 without an error, else 2.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errReported) {
		fmt.Fprintln(stderr, "ingress:", err)
	}
	return 2
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := ingress.ParseFlags(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	if len(cfg.CheckConfig) > 0 {
		if err := rules.CheckConfigWith(stdout, rules.Options{MergeDomains: cfg.MergeDomainConfig}, cfg.CheckConfig...); err != nil {
			return fmt.Errorf("%w: %w", errReported, err) // CheckConfigWith wrote it
		}
		return nil
	}
	stopTracing, err := telemetry.Setup(ctx, "sluice-ingress", os.Getenv) // off unless OTEL_* says otherwise
	if err != nil {
		return err
	}
	defer stopTracing(context.WithoutCancel(ctx))
	m := &ingress.Main{Config: cfg}
	if err := m.Run(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	m.Logger.Info("ingress: shutting down", "timeout", cfg.ShutdownTimeout.String())
	m.Close()
	return nil
}
