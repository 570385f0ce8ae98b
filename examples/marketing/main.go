// Command marketing sends marketing messages through sluice, which lets at most 5 a day
// reach each user: the rest are not refused but parked, and re-admitted when the user's
// window has room again (tomorrow).
//
// It runs against `make run` (rule marketing-per-user of deploy/examples/marketing.yaml:
// 5 per user per day, sliding window counter, overflow park, then a queue drained at 1/s
// to the SMS gateway):
//
//	make run &
//	go run ./examples/marketing            # a fresh user each run
//	go run ./examples/marketing -user u-42 # the same user again: everything is parked
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/client"
)

type config struct {
	url  string
	user string
	n    int
	wait time.Duration // follow the queued messages until delivered, at most this long; 0: do not
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://localhost:8080", "sluice ingress URL")
	flag.StringVar(&c.user, "user", "", "user id (default: a fresh one, so the day's window is empty)")
	flag.IntVar(&c.n, "n", 8, "messages to send to the user")
	flag.DurationVar(&c.wait, "wait", 30*time.Second, "follow the queued messages until delivered, at most this long (0: do not)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "marketing:", err)
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
	if c.user == "" {
		c.user = "user-" + uuid.NewString()[:8]
	}
	descriptor := []client.Entry{{Key: "message_type", Value: "marketing"}, {Key: "user_id", Value: c.user}}
	fmt.Fprintf(w, "sending %d marketing messages to %s (at most 5 a day reach a user)\n", c.n, c.user)

	var queued []string
	var parked []string
	for i := 1; i <= c.n; i++ {
		sub, err := sl.Submit(ctx, "messaging", descriptor, map[string]any{"to": c.user, "text": fmt.Sprintf("offer #%d", i)})
		var ol *client.OverLimitError
		switch {
		case errors.As(err, &ol):
			// Not with this rule (overflow park); a rule with overflow reject answers so.
			fmt.Fprintf(w, "  message %d: refused (429), retry after %v\n", i, ol.RetryAfter)
			continue
		case err != nil:
			return fmt.Errorf("message %d: %w", i, err)
		}
		switch sub.State {
		case client.StateQueued:
			queued = append(queued, sub.ID)
			fmt.Fprintf(w, "  message %d: queued, leaves for the SMS gateway at %s\n", i, sub.ETA.Local().Format("15:04:05"))
		case client.StateParked:
			parked = append(parked, sub.ID)
			fmt.Fprintf(w, "  message %d: parked until the user's window has room: retry_at %s (in %v)\n",
				i, sub.RetryAt.Format(time.RFC3339), time.Until(sub.RetryAt).Round(time.Minute))
		default:
			fmt.Fprintf(w, "  message %d: %s\n", i, sub.State)
		}
	}
	fmt.Fprintf(w, "%d queued for today, %d parked for the next window\n", len(queued), len(parked))
	if len(parked) > 0 {
		st, err := sl.Status(ctx, parked[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "GET /v1/messages/%s: state %s, retry_at %s\n", st.ID, st.State, st.RetryAt.Format(time.RFC3339))
	}
	if c.wait <= 0 || len(queued) == 0 {
		return nil
	}

	// The queue behind the limit drains at 1/s: today's messages arrive a second apart.
	ctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var prev time.Time
	for i, id := range queued {
		for {
			st, err := sl.Status(ctx, id)
			if errors.Is(err, client.ErrNoLongerTracked) {
				return fmt.Errorf("message %d was delivered, but the ingress keeps no record of deliveries to say when: "+
					"run it with -status-keep 1h (on by default with -dev)", i+1)
			}
			if err != nil {
				return err
			}
			if st.Final() {
				gap := ""
				if !prev.IsZero() {
					gap = fmt.Sprintf(" (+%v)", st.UpdatedAt.Sub(prev).Round(10*time.Millisecond))
				}
				prev = st.UpdatedAt
				fmt.Fprintf(w, "  message %d %s at %s%s\n", i+1, st.State, st.UpdatedAt.Local().Format("15:04:05.00"), gap)
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("message %d still %s: %w", i+1, st.State, ctx.Err())
			case <-tick.C:
			}
		}
	}
	return nil
}
