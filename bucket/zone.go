package bucket

import (
	"math"
	"time"
)

// Fixed windows in a time zone (Limit.Location). A window of P (a divisor of a day)
// starts whenever the zone's wall clock first reaches a multiple of P counted from
// local midnight: a day window turns at local midnight, an hour window at the local
// hour (at :30 past the UTC hour in Asia/Kolkata, :15 in Asia/Kathmandu). The window
// index is the wall-clock time divided by P, and never goes back:
//
//   - when the clock springs forward over a boundary, the window starts at the jump
//     (a day in America/New_York on 2026-03-08 lasts 23 hours; the 02:00 hour window
//     does not exist and the 01:00 window ends at 03:00 EDT);
//   - when it falls back, the window in force continues until the wall clock reaches
//     its end again (2026-11-01 lasts 25 hours in New York; the 01:00 hour window
//     lasts two hours), so a hit is never counted in a window that already ended.
//
// It assumes a zone changes its offset at most once within one window and its
// neighbour, which holds for every zone in the tz database since 1970 for windows of
// a day or less.

// zonePeriod is the stretch of time around x (ms) during which loc keeps one offset:
// [start, end) in ms (unbounded ends as MinInt64/MaxInt64) and the offset in ms.
func zonePeriod(loc *time.Location, x int64) (start, end, off int64) {
	t := time.UnixMilli(x).In(loc)
	_, o := t.Zone()
	s, e := t.ZoneBounds()
	start, end = math.MinInt64, math.MaxInt64
	if !s.IsZero() {
		start = s.UnixMilli()
	}
	if !e.IsZero() {
		end = e.UnixMilli()
	}
	return start, end, int64(o) * 1000
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// zoneWindow returns the window of p ms in loc that holds the instant t (ms): its
// start and end in ms since the epoch, end exclusive.
func zoneWindow(loc *time.Location, p, t int64) (start, end int64) {
	zs, ze, off := zonePeriod(loc, t)
	idx := floorDiv(t+off, p)
	// The clock may have fallen back from a later window: the index never goes back.
	fromPrev := false
	var pzs, poff int64
	if zs != math.MinInt64 {
		pzs, _, poff = zonePeriod(loc, zs-1)
		if prev := floorDiv(zs-1+poff, p); prev >= idx {
			idx, fromPrev = prev, true
		}
	}
	if fromPrev {
		// Started in the previous period: where the wall clock reached idx·p there, or
		// where that period began if it jumped into the window.
		start = idx*p - poff
		if pzs != math.MinInt64 && start < pzs {
			start = pzs
		}
	} else {
		start = idx*p - off
		if start < zs {
			start = zs // the clock sprang forward into this window
		}
	}
	// The end: where the wall clock first reaches (idx+1)·p.
	end = (idx+1)*p - off
	if end >= ze && ze != math.MaxInt64 {
		_, _, noff := zonePeriod(loc, ze)
		if floorDiv(ze+noff, p) > idx {
			end = ze // sprang forward over the boundary
		} else {
			end = (idx+1)*p - noff
		}
	}
	return start, end
}

// FixedWindow returns the fixed window of l that holds now: [start, end). The windows
// of a Limit without Location are aligned to the Unix epoch (every Interval since
// 1970-01-01 00:00 UTC); with Location, to that zone's wall clock (see Limit.Location),
// so a day window may last 23 or 25 hours. Meaningful for FixedWindow limits (and the
// windows of SlidingWindowCounter without a Location).
func (l Limit) FixedWindow(now time.Time) (start, end time.Time) {
	p := l.Interval.Milliseconds()
	if p <= 0 {
		return now, now
	}
	t := now.UnixMilli()
	var s, e int64
	if l.Location != nil && l.Location != time.UTC {
		s, e = zoneWindow(l.Location, p, t)
	} else {
		s = floorDiv(t, p) * p
		e = s + p
	}
	return time.UnixMilli(s), time.UnixMilli(e)
}
