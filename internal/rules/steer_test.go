package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/window"
)

const steerBase = `
domain: orders
descriptors:
  - key: merchant_id
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    sink:
      url: http://x/y
`

// TestSteeringOptions: delivery.window, delivery.spacing, delivery.adaptive and
// sink.breaker are read, defaults filled in; leaving them out changes nothing.
func TestSteeringOptions(t *testing.T) {
	t.Parallel()
	r := mustParse(t, steerBase).Rules()[0]
	if r.Delivery.Window.Set || r.Delivery.Spacing != "" || r.Delivery.Adaptive.Enabled || r.Sink.Breaker.Enabled {
		t.Fatalf("options set by default: %+v %+v", r.Delivery, r.Sink.Breaker)
	}
	r = mustParse(t, steerBase+`      breaker: {}
    delivery:
      spacing: strict
      window: {days: [mon-fri, sun], from: "22:00", to: "06:00", time_zone: Asia/Seoul}
      adaptive: {}
`).Rules()[0]
	seoul, _ := time.LoadLocation("Asia/Seoul")
	w := r.Delivery.Window
	if !w.Set || w.Days != 0b0111111 || w.From != 22*time.Hour || w.To != 6*time.Hour || w.Zone.String() != seoul.String() || w.FromMessage {
		t.Errorf("window: %+v", w)
	}
	if r.Delivery.Spacing != SpacingStrict {
		t.Errorf("spacing %q", r.Delivery.Spacing)
	}
	if a := r.Delivery.Adaptive; a != (Adaptive{Enabled: true, Decrease: 0.5, IncreasePerSecond: 0.05}) {
		t.Errorf("adaptive defaults: %+v", a)
	}
	if b := r.Sink.Breaker; b != (Breaker{Enabled: true, Failures: 10, MinKeys: 3, Within: 10 * time.Second, CoolDown: 5 * time.Second, MaxCoolDown: 5 * time.Minute}) {
		t.Errorf("breaker defaults: %+v", b)
	}
	r = mustParse(t, steerBase+`      breaker: {enabled: false, failures: 4, min_keys: 1, within: 30s, cool_down: 1s, max_cool_down: 1m}
    delivery:
      spacing: gcra
      window: {from: "08:00", to: "24:00", time_zone: from_message, default_time_zone: Europe/Berlin}
      adaptive: {enabled: true, decrease: 0.7, increase_per_second: 0.2, min_outflow: {unit: minute, requests_per_unit: 30}}
`).Rules()[0]
	if w := r.Delivery.Window; !w.FromMessage || w.Zone.String() != "Europe/Berlin" || w.Days != 0 || w.To != 24*time.Hour {
		t.Errorf("window: %+v", w)
	}
	if a := r.Delivery.Adaptive; a.Decrease != 0.7 || a.IncreasePerSecond != 0.2 || a.MinOutflow.PerSecond() != 0.5 {
		t.Errorf("adaptive: %+v", a)
	}
	if b := r.Sink.Breaker; b != (Breaker{Failures: 4, MinKeys: 1, Within: 30 * time.Second, CoolDown: time.Second, MaxCoolDown: time.Minute}) {
		t.Errorf("breaker: %+v", b)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSteeringOptionErrors: each bad value is refused with an error naming its field.
func TestSteeringOptionErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sink, delivery string
		field, msg     string
	}{
		{"", `spacing: even`, "delivery.spacing", "must be gcra or strict"},
		{"", `window: {from: "08:00", to: "21:00"}`, "delivery.window.time_zone", "required"},
		{"", `window: {to: "21:00", time_zone: UTC}`, "delivery.window.from", "required"},
		{"", `window: {from: "8", to: "21:00", time_zone: UTC}`, "delivery.window.from", "HH:MM"},
		{"", `window: {from: "08:00", to: "25:00", time_zone: UTC}`, "delivery.window.to", "between 00:00 and 24:00"},
		{"", `window: {from: "08:00", to: "08:00", time_zone: UTC}`, "delivery.window.to", "must differ"},
		{"", `window: {from: "24:00", to: "08:00", time_zone: UTC}`, "delivery.window.from", "before 24:00"},
		{"", `window: {days: [mon-fry], from: "08:00", to: "21:00", time_zone: UTC}`, "delivery.window.days[0]", "unknown day"},
		{"", `window: {days: [], from: "08:00", to: "21:00", time_zone: UTC}`, "delivery.window.days", "a list of days"},
		{"", `window: {from: "08:00", to: "21:00", time_zone: Mars/Olympus}`, "delivery.window.time_zone", "unknown time zone"},
		{"", `window: {from: "08:00", to: "21:00", time_zone: Local}`, "delivery.window.time_zone", "unknown time zone"},
		{"", `window: {from: "08:00", to: "21:00", time_zone: UTC, default_time_zone: UTC}`, "delivery.window.default_time_zone", "only applies with time_zone: from_message"},
		{"", `window: {from: "08:00", to: "21:00", time_zone: UTC, hours: 3}`, "delivery.window.hours", "unknown field"},
		{"", `adaptive: {decrease: 1}`, "delivery.adaptive.decrease", "between 0 and 1"},
		{"", `adaptive: {decrease: .nan}`, "delivery.adaptive.decrease", "finite"},
		{"", `adaptive: {decrease: half}`, "delivery.adaptive.decrease", "must be a number"},
		{"", `adaptive: {increase_per_second: 0}`, "delivery.adaptive.increase_per_second", "> 0"},
		{"", `adaptive: {enabled: yes please}`, "delivery.adaptive.enabled", "true or false"},
		{"", `adaptive: {min_outflow: {unit: second, requests_per_unit: 20}}`, "delivery.adaptive.min_outflow", "≤ queue.outflow"},
		{"breaker: {failures: 0}", "", "sink.breaker.failures", "between 1 and"},
		{"breaker: {failures: 2, min_keys: 3}", "", "sink.breaker.min_keys", "≤ failures"},
		{"breaker: {within: 0s}", "", "sink.breaker.within", "> 0"},
		{"breaker: {cool_down: 1m, max_cool_down: 30s}", "", "sink.breaker.max_cool_down", "≥ cool_down"},
		{"breaker: [on]", "", "sink.breaker", "must be a mapping"},
	} {
		y := steerBase
		if c.sink != "" {
			y += "      " + c.sink + "\n"
		}
		if c.delivery != "" {
			y += "    delivery:\n      " + c.delivery + "\n"
		}
		_, err := Parse("f.yaml", []byte(y))
		var all ValidationErrors
		if !errors.As(err, &all) {
			t.Errorf("%s: no validation error (%v)", c.field, err)
			continue
		}
		found := false
		for _, e := range all {
			if strings.HasSuffix(e.Field, c.field) && strings.Contains(e.Message, c.msg) && e.Line > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: want an error at %s saying %q, got %v", c.sink, c.delivery, c.field, c.msg, err)
		}
	}
}

// TestWindowFromRulesIsTheWindowPackages: the parsed window is what internal/window
// evaluates, in the zone written.
func TestWindowFromRulesIsTheWindowPackages(t *testing.T) {
	t.Parallel()
	r := mustParse(t, steerBase+`    delivery:
      window: {days: [mon-fri], from: "22:00", to: "06:00", time_zone: Asia/Seoul}
`).Rules()[0]
	var w window.Window = r.Delivery.Window
	// Friday 2026-11-27 23:00 KST is open; Saturday 2026-11-28 07:00 KST is not.
	if !w.Open(time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC), nil) || w.Open(time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC), nil) {
		t.Fatal("the parsed window does not open and close as written")
	}
}

// TestValidateSteering: a rule derived in code (an override) is held to the same bounds.
func TestValidateSteering(t *testing.T) {
	t.Parallel()
	base := mustParse(t, steerBase).Rules()[0]
	for _, c := range []struct {
		name   string
		mutate func(r *Rule)
		field  string
	}{
		{"spacing", func(r *Rule) { r.Delivery.Spacing = "even" }, "delivery.spacing"},
		{"window from = to", func(r *Rule) { r.Delivery.Window = window.Window{Set: true, From: time.Hour, To: time.Hour} }, "delivery.window"},
		{"adaptive decrease", func(r *Rule) { r.Delivery.Adaptive = Adaptive{Enabled: true, Decrease: 1, IncreasePerSecond: 0.1} }, "delivery.adaptive"},
		{"adaptive floor", func(r *Rule) {
			r.Delivery.Adaptive = Adaptive{Enabled: true, Decrease: 0.5, IncreasePerSecond: 0.1, MinOutflow: Rate{Requests: 11, Interval: time.Second}}
		}, "delivery.adaptive.min_outflow"},
		{"breaker keys", func(r *Rule) {
			r.Sink.Breaker = Breaker{Enabled: true, Failures: 2, MinKeys: 3, Within: time.Second, CoolDown: time.Second, MaxCoolDown: time.Second}
		}, "sink.breaker"},
	} {
		r := *base
		c.mutate(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Validate = %v, want an error naming %s", c.name, err, c.field)
		}
	}
	r := *base
	r.Delivery.Spacing = "" // a rule built in code without it: gcra
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
}
