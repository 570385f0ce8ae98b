package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
)

// units are the rate units a person may type, by the unit the API names.
var units = map[string]string{
	"s": "second", "sec": "second", "second": "second",
	"m": "minute", "min": "minute", "minute": "minute",
	"h": "hour", "hour": "hour",
	"d": "day", "day": "day",
	"w": "week", "week": "week",
}

// parseRate reads "5/s", "300/minute" or "10/30s" (10 per 30 seconds).
func parseRate(s string) (*client.Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return nil, fmt.Errorf("rate %q: want N/UNIT (5/s, 300/m, 10/h) or N/DURATION (10/30s)", s)
	}
	count, err := strconv.ParseInt(n, 10, 64)
	if err != nil || count < 0 {
		return nil, fmt.Errorf("rate %q: %q is not a count", s, n)
	}
	p := strings.ToLower(per)
	if len(p) > 3 { // a plural: "seconds", "mins"; never "ms", "hs"
		p = strings.TrimSuffix(p, "s")
	}
	if u, ok := units[p]; ok {
		return &client.Rate{Unit: u, RequestsPerUnit: count}, nil
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("rate %q: %q is not a unit (s, m, h, d, w) nor a duration (30s)", s, per)
	}
	return &client.Rate{Interval: d.String(), RequestsPerUnit: count}, nil
}

// formatRate writes a rate as parseRate reads it: "5/s", "10/30s"; "-" for none.
func formatRate(r *client.Rate) string {
	if r == nil {
		return "-"
	}
	if r.Interval != "" {
		return fmt.Sprintf("%d/%s", r.RequestsPerUnit, r.Interval)
	}
	short := map[string]string{"second": "s", "minute": "m", "hour": "h", "day": "d", "week": "w"}[r.Unit]
	if short == "" {
		short = r.Unit
	}
	return fmt.Sprintf("%d/%s", r.RequestsPerUnit, short)
}

// formatAge writes a duration for people: "1.5s", "3m2s"; "-" for none.
func formatAge(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return d.Round(100 * time.Millisecond).String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
