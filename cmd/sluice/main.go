// Command sluice is the command for people. `sluice dev` runs the whole system in one
// process (internal/devstack); the operator commands join it as they are written.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	_ "time/tzdata" // rules' time_zone works without zoneinfo

	"github.com/sluice-io/sluice/internal/devstack"
	"github.com/sluice-io/sluice/internal/process"
)

const usage = `usage: sluice COMMAND [flags]

  dev       the whole system in one process: embedded NATS, in-process store and
            drainer, demo sink, example rules (sluice dev -help)
  version   print the version
`

func main() { os.Exit(process.Exec("sluice", run)) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "dev":
		return devstack.Run(ctx, args[1:], getenv, stdout, stderr)
	case len(args) > 0 && (args[0] == "version" || args[0] == "-version" || args[0] == "--version"):
		_, err := fmt.Fprintln(stdout, "sluice", process.Version())
		return err
	case len(args) == 0:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: %w", process.ErrReported, process.ErrUsage)
	case args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		_, err := fmt.Fprint(stdout, usage)
		return err
	}
	return process.UsageError(fmt.Errorf("unknown command %q\n%s", args[0], usage))
}
