package window

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Window is when a rule's deliveries may happen: from From to To (wall-clock offsets into
// the day) on Days, in a time zone. The zero value is always open.
//
// From > To crosses midnight: the window opens on a listed day at From and closes the
// next day at To (fri 22:00–06:00 is open Saturday at 03:00). From == To is not a window
// (the parser refuses it); To may be 24h (until midnight).
type Window struct {
	// Days: bit d (time.Weekday: 0 Sunday … 6 Saturday) set = the window opens that day.
	// 0 = every day.
	Days uint8
	From time.Duration
	To   time.Duration
	// Zone is the window's time zone; nil: UTC. With FromMessage it is the zone of
	// messages that did not give one.
	Zone *time.Location
	// FromMessage: each message's own zone (its time_zone at submit, the Sluice-Time-Zone
	// header) decides, Zone for those without one.
	FromMessage bool
	// Set: the rule has a window (the zero Window is always open).
	Set bool
}

// HeaderTimeZone is the message header (queue.Message.Headers) carrying the time_zone a
// message was submitted with, an IANA name validated by LoadZone at submit. The sink
// receives it too.
const HeaderTimeZone = "Sluice-Time-Zone"

// AllDays is every day of the week.
const AllDays uint8 = 0x7f

// Location picks the zone a message is judged in: msg when the window follows the
// message's zone and msg is not nil, else the window's own (UTC when none).
func (w Window) Location(msg *time.Location) *time.Location {
	if w.FromMessage && msg != nil {
		return msg
	}
	if w.Zone != nil {
		return w.Zone
	}
	return time.UTC
}

func (w Window) days() uint8 {
	if w.Days == 0 {
		return AllDays
	}
	return w.Days
}

func (w Window) on(d time.Weekday) bool { return w.days()&(1<<uint(d)) != 0 }

// sinceMidnight is t's wall-clock offset into its day (in t's location).
func sinceMidnight(t time.Time) time.Duration {
	h, m, s := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(t.Nanosecond())
}

// Open reports whether deliveries may happen at t, judged by the wall clock of zone (see
// Location; nil: the window's own). A window that is not Set is always open.
func (w Window) Open(t time.Time, zone *time.Location) bool {
	if !w.Set {
		return true
	}
	if zone == nil {
		zone = w.Location(nil)
	}
	local := t.In(zone)
	sod := sinceMidnight(local)
	wd := local.Weekday()
	if w.From < w.To {
		return w.on(wd) && sod >= w.From && sod < w.To
	}
	// Crosses midnight: the evening part belongs to today, the morning part to yesterday.
	return (w.on(wd) && sod >= w.From) || (w.on((wd+6)%7) && sod < w.To)
}

// NextOpen is the earliest instant ≥ t at which the window is open: t itself when it is.
// Wall-clock times that a daylight-saving change skips (02:30 on a spring-forward night)
// open at the change. A window that is not Set is always open.
func (w Window) NextOpen(t time.Time, zone *time.Location) time.Time {
	if w.Open(t, zone) {
		return t
	}
	if zone == nil {
		zone = w.Location(nil)
	}
	local := t.In(zone)
	y, m, d := local.Date()
	fh, fm, fs := int(w.From/time.Hour), int(w.From%time.Hour/time.Minute), int(w.From%time.Minute/time.Second)
	for i := 0; i <= 8; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, zone) // noon: never in a DST change
		if !w.on(day.Weekday()) {
			continue
		}
		c := time.Date(y, m, d+i, fh, fm, fs, 0, zone)
		if h, mi, s := c.Clock(); h != fh || mi != fm || s != fs {
			// From does not exist that day (a DST change skips it): time.Date picked a
			// neighbouring offset; the window opens at the change, the first instant whose
			// wall clock is past From — the end of the zone period c fell in when c's wall
			// clock is before From, its start when after.
			start, end := c.ZoneBounds()
			if sinceMidnight(c) < w.From && !end.IsZero() {
				c = end
			} else if !start.IsZero() {
				c = start
			}
		} else if start, _ := c.ZoneBounds(); !start.IsZero() {
			// From happens twice that day (the fall-back night) and time.Date may have
			// picked the second: the first, in the period before, opens the window.
			_, off := c.Zone()
			_, prevOff := start.Add(-time.Nanosecond).Zone()
			if alt := c.Add(time.Duration(off-prevOff) * time.Second); alt.Before(start) && sinceMidnight(alt.In(zone)) == w.From && !alt.Before(t) {
				c = alt
			}
		}
		// !Open(c): a window that lies wholly in the hour a DST change skips does not
		// happen that day.
		if !c.Before(t) && w.Open(c, zone) {
			return w.reopened(t, c, zone)
		}
	}
	return t // unreachable for a valid window (some day is listed); be open rather than stall
}

// reopened returns the first zone transition in (t, c) at which the window is open, else
// c. Within one zone period the wall clock only moves forward, so a window opens at a From
// time; at a transition that turns the clock back (the fall-back night) it may open again
// in the repeated hour (a window to 02:30 is open again at 03:00 CEST = 02:00 CET).
func (w Window) reopened(t, c time.Time, zone *time.Location) time.Time {
	at := t.In(zone)
	for range 4 {
		_, end := at.ZoneBounds()
		if end.IsZero() || !end.Before(c) {
			break
		}
		if w.Open(end, zone) {
			return end
		}
		at = end.In(zone)
	}
	return c
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseDays reads a list of days: names (mon, tuesday, any case) or ranges of them
// (mon-fri, fri-mon wraps over the weekend).
func ParseDays(items []string) (uint8, error) {
	var days uint8
	for _, it := range items {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(it), "-")
		a, err := parseDay(lo)
		if err != nil {
			return 0, err
		}
		b := a
		if isRange {
			if b, err = parseDay(hi); err != nil {
				return 0, err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			days |= 1 << uint(d)
			if d == b {
				break
			}
		}
	}
	return days, nil
}

func parseDay(s string) (time.Weekday, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i, n := range dayNames {
		if len(s) >= 3 && strings.HasPrefix(strings.ToLower(time.Weekday(i).String()), s) && strings.HasPrefix(s, n) {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("unknown day %q (mon, tue, wed, thu, fri, sat, sun, or a range such as mon-fri)", s)
}

// ParseClock reads "HH:MM" (00:00 to 24:00) as an offset into the day.
func ParseClock(s string) (time.Duration, error) {
	var h, m int
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("must be HH:MM, such as 08:00 or 21:30 (got %q)", s)
	}
	if _, err := fmt.Sscanf(s, "%02d:%02d", &h, &m); err != nil || h < 0 || h > 24 || m < 0 || m > 59 || (h == 24 && m != 0) {
		return 0, fmt.Errorf("must be HH:MM between 00:00 and 24:00 (got %q)", s)
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
}

// zones keeps every zone loaded, by name, so a message's zone costs a map read.
var zones sync.Map // string → *time.Location

// ErrZone is returned by LoadZone for a name that is not an IANA time zone.
var ErrZone = errors.New("not an IANA time zone name (such as Asia/Seoul, America/New_York or UTC)")

// LoadZone returns the IANA zone name: refused are "", "Local" (the process's zone, not a
// message's), paths, and names the tz database does not have.
func LoadZone(name string) (*time.Location, error) {
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "" || name == "Local" || len(name) > 64 || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, ErrZone
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, ErrZone
	}
	l2, _ := zones.LoadOrStore(name, l)
	return l2.(*time.Location), nil
}

// String writes the window as the rules file does, for logs and the admin API.
func (w Window) String() string {
	if !w.Set {
		return "always"
	}
	var ds []string
	for d := range 7 {
		if w.on(time.Weekday(d)) {
			ds = append(ds, dayNames[d])
		}
	}
	zone := "UTC"
	if w.Zone != nil {
		zone = w.Zone.String()
	}
	if w.FromMessage {
		zone = "from_message, else " + zone
	}
	clock := func(d time.Duration) string {
		return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%s %s–%s %s", strings.Join(ds, ","), clock(w.From), clock(w.To), zone)
}
