// Command login asks sluice whether a login attempt may go ahead, the way an API gateway
// or envoy asks a rate-limit service: a check-only rule (no queue), POST /v1/check.
//
// It runs against `make run` (rule auth-login of deploy/examples/auth.yaml: 5 logins a
// minute for the auth_type=login descriptor, counted together):
//
//	make run &
//	go run ./examples/login
//
// The first 5 attempts of a minute are OK; the 6th is OVER_LIMIT, with a Retry-After
// saying when the window has room again. Run it twice within a minute and every attempt
// of the second run is over the limit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/sluice-io/sluice/client"
)

type config struct {
	url      string
	attempts int
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://localhost:8080", "sluice ingress URL")
	flag.IntVar(&c.attempts, "n", 6, "login attempts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "login:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, c config) error {
	sl, err := client.New(c.url)
	if err != nil {
		return err
	}
	if err := sl.Ready(ctx); err != nil {
		return fmt.Errorf("is sluice running at %s (make run)? %w", c.url, err)
	}
	login := [][]client.Entry{{{Key: "auth_type", Value: "login"}}}
	for i := 1; i <= c.attempts; i++ {
		// A check counts one hit and is never retried on OVER_LIMIT: "no" is the answer.
		r, err := sl.Check(ctx, "auth", login, 1)
		if err != nil {
			return fmt.Errorf("attempt %d: %w", i, err)
		}
		limit := "no limit applies"
		if len(r.Statuses) > 0 && r.Statuses[0].CurrentLimit != nil {
			l := r.Statuses[0].CurrentLimit
			limit = fmt.Sprintf("%d left of %d per %s", r.Statuses[0].LimitRemaining, l.RequestsPerUnit, l.Unit)
		}
		if r.OK() {
			fmt.Fprintf(w, "login %d: %s — let it in (%s)\n", i, r.OverallCode, limit)
			continue
		}
		fmt.Fprintf(w, "login %d: %s — refuse it; Retry-After: %d s (window resets in %v)\n",
			i, r.OverallCode, int(r.RateLimit.RetryAfter.Seconds()), r.Statuses[0].DurationUntilReset)
	}
	return nil
}
