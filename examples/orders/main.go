// Command orders is a shop that sends its orders to its merchants through sluice: each
// merchant's orders wait in that merchant's queue and reach the merchant's endpoint (the
// sink) at the queue's outflow, however fast the shop submits them.
//
// It runs against `make run` (rule orders-per-merchant of deploy/examples/orders.yaml:
// capacity 100 per merchant, outflow 10/s, overflow park):
//
//	make run &
//	go run ./examples/orders
//
// The first merchant gets more orders than its queue holds: the ones that do not fit are
// parked and re-admitted when there is room (a rule with overflow reject would answer 429
// instead, which is counted too). Then it follows every order (GET /v1/messages/{id})
// until delivered and shows the pace at which each merchant received them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-io/sluice/client"
)

type config struct {
	url       string
	merchants []string
	n         int           // orders per merchant
	burst     int           // extra orders for the first merchant
	timeout   time.Duration // for all deliveries
	verbose   bool
}

func main() {
	var c config
	var merchants string
	flag.StringVar(&c.url, "url", "http://localhost:8080", "sluice ingress URL")
	flag.StringVar(&merchants, "merchants", "m-1,m-2,m-3", "merchant ids, comma-separated")
	flag.IntVar(&c.n, "n", 30, "orders per merchant")
	flag.IntVar(&c.burst, "burst", 90, "extra orders for the first merchant (beyond its queue's capacity of 100 they are parked)")
	flag.DurationVar(&c.timeout, "timeout", 2*time.Minute, "how long to wait for every order to be delivered")
	flag.BoolVar(&c.verbose, "v", false, "print every submission")
	flag.Parse()
	for _, m := range strings.Split(merchants, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.merchants = append(c.merchants, m)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// order is one submitted order and what became of it.
type order struct {
	merchant string
	n        int
	id       string
	state    string    // at submission: queued, parked, or "429"
	retryAt  time.Time // parked
	done     *client.MessageStatus
}

func run(ctx context.Context, w io.Writer, c config) error {
	if len(c.merchants) == 0 || c.n < 0 || c.burst < 0 {
		return errors.New("need at least one merchant and non-negative -n, -burst")
	}
	sl, err := client.New(c.url)
	if err != nil {
		return err
	}
	if err := sl.Ready(ctx); err != nil {
		return fmt.Errorf("is sluice running at %s (make run)? %w", c.url, err)
	}
	run := uuid.NewString()[:8] // idempotency keys are per order; this keeps runs apart

	count := map[string]int{}
	for i, m := range c.merchants {
		count[m] = c.n
		if i == 0 {
			count[m] += c.burst
		}
	}
	fmt.Fprintf(w, "submitting orders to %s:", c.url)
	for _, m := range c.merchants {
		fmt.Fprintf(w, " %d for %s,", count[m], m)
	}
	fmt.Fprintln(w, " as fast as possible")

	// Submit. The client would retry a 429 after its Retry-After by itself (the default);
	// this shop wants to see refusals, so it turns that off per call.
	var orders []*order
	start := time.Now()
	for _, m := range c.merchants {
		var queued, parked, refused int
		var policy client.Policy
		var firstParked *order
		for i := 1; i <= count[m]; i++ {
			o := &order{merchant: m, n: i}
			opts := []client.SubmitOption{client.WithIdempotencyKey(fmt.Sprintf("order-%s-%s-%d", run, m, i)), client.SubmitOverLimitRetry(false)}
			if i == 1 {
				// The first order asks for its depth, eta and the queue's policy (a stream
				// request on the server); the others are one publish each.
				opts = append(opts, client.WithDepth())
			}
			sub, err := sl.Submit(ctx, "orders", []client.Entry{{Key: "merchant_id", Value: m}},
				map[string]any{"order_id": fmt.Sprintf("%s-%d", m, i), "total": "12.50"}, opts...)
			var ol *client.OverLimitError
			switch {
			case errors.As(err, &ol):
				o.state = "429"
				refused++
				if c.verbose {
					fmt.Fprintf(w, "  %s order %d: 429, retry after %v (%v)\n", m, i, ol.RetryAfter, ol)
				}
				continue
			case err != nil:
				return fmt.Errorf("%s order %d: %w", m, i, err)
			}
			o.id, o.state, o.retryAt = sub.ID, sub.State, sub.RetryAt
			orders = append(orders, o)
			if len(sub.RateLimit.Policies) > 0 {
				policy = sub.RateLimit.Policies[0]
			}
			switch sub.State {
			case client.StateQueued:
				queued++
				if c.verbose {
					fmt.Fprintf(w, "  %s order %d: queued, %d/%d in the queue, leaves at %s\n", m, i, sub.Depth, sub.Capacity, sub.ETA.Format("15:04:05.000"))
				}
			case client.StateParked:
				parked++
				if firstParked == nil {
					firstParked = o
				}
				if c.verbose {
					fmt.Fprintf(w, "  %s order %d: parked, retried at %s\n", m, i, sub.RetryAt.Format("15:04:05"))
				}
			}
		}
		fmt.Fprintf(w, "%s: %d queued, %d parked, %d refused (429)", m, queued, parked, refused)
		if policy.Name != "" && policy.Window > 0 {
			fmt.Fprintf(w, " — policy %q: %d waiting at most, drained at %.3g/s", policy.Name, policy.Quota, float64(policy.Quota)/policy.Window.Seconds())
		}
		fmt.Fprintln(w)
		if firstParked != nil {
			fmt.Fprintf(w, "  the queue was full from order %d on; parked orders are re-admitted from %s\n", firstParked.n, firstParked.retryAt.Format("15:04:05"))
		}
	}
	fmt.Fprintf(w, "all submitted in %v; following them until delivered…\n", time.Since(start).Round(time.Millisecond))

	// Follow every order until it is delivered (or dead).
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	pending := slices.Clone(orders)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	for len(pending) > 0 {
		var still []*order
		for _, o := range pending {
			st, err := sl.Status(ctx, o.id)
			if errors.Is(err, client.ErrNoLongerTracked) {
				return fmt.Errorf("%s order %d was delivered, but the ingress keeps no record of deliveries to say when: "+
					"run it with -status-keep 1h (on by default with -dev) to follow orders to the sink", o.merchant, o.n)
			}
			if err != nil {
				return fmt.Errorf("status of %s order %d: %w", o.merchant, o.n, err)
			}
			if st.Final() {
				o.done = st
			} else {
				still = append(still, o)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Since(lastReport) > 2*time.Second {
			fmt.Fprintf(w, "  %d of %d delivered\n", len(orders)-len(pending), len(orders))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d orders not delivered yet: %w", len(pending), ctx.Err())
		case <-tick.C:
		}
	}

	// How each merchant received them: the sink saw each order at its status's updated_at.
	for _, m := range c.merchants {
		var at []time.Time
		var dead int
		for _, o := range orders {
			if o.merchant != m {
				continue
			}
			if o.done.State == client.StateDead {
				dead++
				continue
			}
			at = append(at, o.done.UpdatedAt)
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		fmt.Fprintf(w, "%s: %d delivered", m, len(at))
		if dead > 0 {
			fmt.Fprintf(w, ", %d dead (see GET /v1/admin/dead)", dead)
		}
		if len(at) > 1 {
			span := at[len(at)-1].Sub(at[0])
			fmt.Fprintf(w, ", first to last in %v: %.1f/s", span.Round(10*time.Millisecond), float64(len(at)-1)/span.Seconds())
		}
		fmt.Fprintln(w)
	}
	return nil
}
