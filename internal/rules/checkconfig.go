package rules

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/internal/redact"
)

// CheckConfig validates rules files offline, for `ingress -check-config FILE`.
// It loads paths as Load does and writes either a summary of the rules to w, or
// every problem found, one per line as "file:line: field: message". It returns the
// load error (nil when the rules are valid), so the caller can exit non-zero.
func CheckConfig(w io.Writer, paths ...string) error {
	return CheckConfigWith(w, Options{}, paths...)
}

// CheckConfigWith is CheckConfig with load options (-merge-domain-config).
func CheckConfigWith(w io.Writer, o Options, paths ...string) error {
	set, err := LoadWith(o, paths...)
	if err != nil {
		var ve ValidationErrors
		if errors.As(err, &ve) {
			fmt.Fprintf(w, "rules: %d problem(s):\n", len(ve))
			for _, e := range ve {
				fmt.Fprintln(w, e.Error())
			}
		} else {
			fmt.Fprintln(w, err)
		}
		return err
	}
	rules := set.Rules()
	queues := len(set.QueueRules())
	fmt.Fprintf(w, "rules: OK: %d rules (%d queue rules, %d check-only rules) in %d domains from %d files\n",
		len(rules), queues, len(rules)-queues, len(set.Domains()), len(set.Files()))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rules {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Name, r.Domain, describePath(r.Path), describeRule(r))
	}
	return tw.Flush()
}

// describePath renders a path as "message_type=marketing / user_id".
func describePath(path []PathEntry) string {
	parts := make([]string, len(path))
	for i, e := range path {
		parts[i] = e.Key
		if e.Value != "" {
			parts[i] += "=" + e.Value
		}
	}
	return strings.Join(parts, " / ")
}

func describeRule(r *Rule) string {
	var parts []string
	if q := r.Queue; q != nil {
		s := fmt.Sprintf("queue capacity=%d outflow=%s", q.Capacity, describeRate(q.Outflow))
		if !q.TotalOutflow.Zero() {
			s += " total_outflow=" + describeRate(q.TotalOutflow)
		}
		parts = append(parts, s)
	} else {
		parts = append(parts, "check-only")
	}
	if r.Unlimited {
		parts = append(parts, "unlimited")
	}
	for _, l := range r.RateLimits {
		s := fmt.Sprintf("limit %s %s", describeRate(l.Rate), l.Algorithm)
		if l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket {
			s += fmt.Sprintf(" burst=%d", l.Burst)
		}
		if l.TimeZone != nil {
			s += " time_zone=" + l.TimeZone.String()
		}
		parts = append(parts, s)
	}
	if r.ShadowMode {
		parts = append(parts, "shadow_mode")
	}
	if r.QuotaMode {
		parts = append(parts, "quota_mode")
	}
	if r.AllOrNothing {
		parts = append(parts, "all_or_nothing")
	}
	if r.Checks == ChecksShare {
		parts = append(parts, "checks=share")
	}
	if lo := r.LimitOverride; lo.Refused {
		parts = append(parts, "limit_override=refused")
	} else if lo.MaxFactor != 0 || lo.MaxWindow != 0 {
		parts = append(parts, fmt.Sprintf("limit_override max_factor=%d max_window=%s", lo.MaxFactor, lo.MaxWindow))
	}
	if r.Overflow == OverflowPark {
		parts = append(parts, "overflow=park")
	}
	if len(r.Replaces) > 0 {
		parts = append(parts, "replaces="+strings.Join(r.Replaces, ","))
	}
	switch {
	case r.Sink.URL != "":
		parts = append(parts, "sink="+redact.URL(r.Sink.URL)) // -check-config output lands in CI logs
	case r.Sink.NATSSubject != "":
		parts = append(parts, "sink=nats:"+r.Sink.NATSSubject)
	}
	return strings.Join(parts, "; ")
}

func describeRate(r Rate) string { return fmt.Sprintf("%d/%s", r.Requests, r.Interval) }
