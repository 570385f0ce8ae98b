package window

import (
	"fmt"
	"strings"
	"time"
)

// Spec is a Window as JSON carries it: the rules file's delivery.window fields
// ({days, from, to, time_zone, default_time_zone}). A per-key override's `window` takes
// it (PATCH /v1/admin/queues/{name}/keys/{key}), and the admin API shows windows with it.
type Spec struct {
	Days            []string `json:"days,omitempty"`
	From            string   `json:"from"`
	To              string   `json:"to"`
	TimeZone        string   `json:"time_zone"`
	DefaultTimeZone string   `json:"default_time_zone,omitempty"`
}

// FieldError is one problem of a Spec, naming its field ("from", "days[1]").
type FieldError struct {
	Field   string
	Message string
}

// FromMessage is the time_zone that judges each message on its own zone.
const FromMessage = "from_message"

// Window checks s as the rules file checks delivery.window and returns the window, or
// every problem, each naming its field (relative: "from", "time_zone").
func (s Spec) Window() (Window, []FieldError) {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	w := Window{Set: true}
	for i, d := range s.Days {
		b, err := ParseDays([]string{d})
		if err != nil {
			add(fmt.Sprintf("days[%d]", i), "%v", err)
			continue
		}
		w.Days |= b
	}
	clock := func(name, v string) (time.Duration, bool) {
		if v == "" {
			add(name, "required: a time of day such as 08:00")
			return 0, false
		}
		c, err := ParseClock(v)
		if err != nil {
			add(name, "%v", err)
			return 0, false
		}
		return c, true
	}
	from, okF := clock("from", s.From)
	to, okT := clock("to", s.To)
	switch {
	case !okF || !okT:
	case from == to:
		add("to", "must differ from from (a window of no time, or of the whole day: leave the window out)")
	case from == 24*time.Hour:
		add("from", "must be before 24:00")
	}
	w.From, w.To = from, to
	switch s.TimeZone {
	case "":
		add("time_zone", "required: an IANA zone such as Asia/Seoul, UTC, or from_message (each message's time_zone)")
	case FromMessage:
		w.FromMessage = true
	default:
		loc, err := LoadZone(s.TimeZone)
		if err != nil {
			add("time_zone", "unknown time zone %q: %v, or from_message", s.TimeZone, err)
		}
		w.Zone = loc
	}
	if s.DefaultTimeZone != "" {
		if !w.FromMessage {
			add("default_time_zone", "only applies with time_zone: from_message")
		} else if loc, err := LoadZone(s.DefaultTimeZone); err != nil {
			add("default_time_zone", "unknown time zone %q: %v", s.DefaultTimeZone, err)
		} else {
			w.Zone = loc
		}
	}
	if len(errs) > 0 {
		return Window{}, errs
	}
	return w, nil
}

// SpecOf is w as a Spec (days as ranges where they run on: mon-fri); nil for a window
// that is not Set.
func SpecOf(w Window) *Spec {
	if !w.Set {
		return nil
	}
	s := &Spec{From: clockText(w.From), To: clockText(w.To), TimeZone: "UTC"}
	if w.Days != 0 && w.Days != AllDays {
		s.Days = dayRanges(w.Days)
	}
	if w.Zone != nil {
		s.TimeZone = w.Zone.String()
	}
	if w.FromMessage {
		s.DefaultTimeZone = s.TimeZone
		s.TimeZone = FromMessage
	}
	return s
}

func clockText(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// dayRanges writes days Monday first, runs of three or more as ranges: [mon-fri, sun].
func dayRanges(days uint8) []string {
	order := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	on := func(i int) bool { return i < 7 && days&(1<<uint(order[i])) != 0 }
	var out []string
	for i := 0; i < 7; i++ {
		if !on(i) {
			continue
		}
		j := i
		for on(j + 1) {
			j++
		}
		switch {
		case j-i >= 2:
			out = append(out, dayNames[order[i]]+"-"+dayNames[order[j]])
		case j == i+1:
			out = append(out, dayNames[order[i]], dayNames[order[j]])
		default:
			out = append(out, dayNames[order[i]])
		}
		i = j
	}
	return out
}

// ParseSpecText reads a window as one line, as `sluice tune --window` and the bulk CSV
// take it: "[DAYS] HH:MM-HH:MM ZONE", where DAYS is a comma-separated list of days or
// ranges (mon-fri,sun; every day when left out) and ZONE an IANA zone or from_message
// (optionally followed by the zone of messages without one):
//
//	mon-fri 09:00-18:00 Europe/Paris
//	22:00-06:00 Asia/Seoul
//	sat,sun 10:00-16:00 from_message America/New_York
//
// The fields it returns are checked by Spec.Window, which names them.
func ParseSpecText(text string) (Spec, error) {
	f := strings.Fields(text)
	var s Spec
	if len(f) > 0 && !strings.Contains(f[0], ":") {
		s.Days = strings.Split(f[0], ",")
		f = f[1:]
	}
	if len(f) < 2 || len(f) > 3 {
		return Spec{}, fmt.Errorf("%q: want [DAYS] HH:MM-HH:MM ZONE, such as \"mon-fri 09:00-18:00 Europe/Paris\"", text)
	}
	from, to, ok := strings.Cut(f[0], "-")
	if !ok {
		return Spec{}, fmt.Errorf("%q: the hours must be HH:MM-HH:MM, such as 09:00-18:00 (got %q)", text, f[0])
	}
	s.From, s.To, s.TimeZone = from, to, f[1]
	if len(f) == 3 {
		if f[1] != FromMessage {
			return Spec{}, fmt.Errorf("%q: a second zone follows from_message only (the zone of messages without one)", text)
		}
		s.DefaultTimeZone = f[2]
	}
	return s, nil
}

// Text is s in ParseSpecText's form.
func (s Spec) Text() string {
	t := s.From + "-" + s.To + " " + s.TimeZone
	if s.DefaultTimeZone != "" {
		t += " " + s.DefaultTimeZone
	}
	if len(s.Days) > 0 {
		t = strings.Join(s.Days, ",") + " " + t
	}
	return t
}

// Equal reports whether a and b are the same window.
func (w Window) Equal(b Window) bool {
	return w.Set == b.Set && w.Days == b.Days && w.From == b.From && w.To == b.To &&
		w.FromMessage == b.FromMessage && w.Location(nil).String() == b.Location(nil).String()
}
