package rules

import (
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// locations keeps every zone loaded, by name, so a reload hands the limiter the same
// *time.Location (and does not read the tz database again). There are a few hundred.
var locations sync.Map // string → *time.Location

func loadLocation(name string) (*time.Location, error) {
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	l2, _ := locations.LoadOrStore(name, l)
	return l2.(*time.Location), nil
}

// timeZone reads `time_zone`: an IANA zone name for a fixed window that divides a day.
// The other algorithms have no window edges for a zone to move: a bucket refills and a
// sliding window slides the same in every zone; the sliding window counter's windows
// weigh each other by their common length, which days of 23 and 25 hours do not have.
func (p *fileParser) timeZone(n *yaml.Node, field string, l RateLimit) (*time.Location, bool) {
	name, ok := p.str(n, field)
	if !ok {
		return nil, false
	}
	if name == "" || name == "Local" {
		p.errorf(n, field, "must be an IANA time zone name such as Asia/Seoul or UTC (got %q)", name)
		return nil, false
	}
	loc, err := loadLocation(name)
	if err != nil || strings.HasPrefix(name, "/") {
		p.errorf(n, field, "unknown time zone %q (an IANA name such as Asia/Seoul, America/New_York or UTC)", name)
		return nil, false
	}
	switch {
	case l.Algorithm != FixedWindow:
		p.errorf(n, field, "only applies to fixed_window (algorithm is %s: it has no window edges for a time zone to move)", l.Algorithm)
		return nil, false
	case l.Rate.Interval > 0 && (24*time.Hour)%l.Rate.Interval != 0:
		p.errorf(n, field, "needs a window that divides a day (an hour, 6h, a day…; got %s)", l.Rate.Interval)
		return nil, false
	}
	return loc, true
}
