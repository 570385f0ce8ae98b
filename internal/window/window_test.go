package window

import (
	"testing"
	"time"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	l, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func clock(s string) time.Duration {
	d, err := ParseClock(s)
	if err != nil {
		panic(err)
	}
	return d
}

func days(items ...string) uint8 {
	d, err := ParseDays(items)
	if err != nil {
		panic(err)
	}
	return d
}

// TestSeoulNightWindowCrossesMidnight: deliveries Monday to Friday nights, 22:00 to 06:00
// in Asia/Seoul (UTC+9). A night belongs to the day it starts: Saturday 03:00 is Friday's
// night (open), Monday 03:00 is Sunday's (closed).
func TestSeoulNightWindowCrossesMidnight(t *testing.T) {
	t.Parallel()
	seoul := zone(t, "Asia/Seoul")
	w := Window{Set: true, Days: days("mon-fri"), From: clock("22:00"), To: clock("06:00"), Zone: seoul}
	kst := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, seoul)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// 2026-11-27 is a Friday.
	for _, c := range []struct {
		at, next string
	}{
		{"2026-11-27 21:59", "2026-11-27 22:00"}, // Friday evening, before the night
		{"2026-11-27 22:00", "2026-11-27 22:00"}, // opens
		{"2026-11-27 23:59", "2026-11-27 23:59"},
		{"2026-11-28 00:00", "2026-11-28 00:00"}, // past midnight: Saturday, still Friday's night
		{"2026-11-28 05:59", "2026-11-28 05:59"},
		{"2026-11-28 06:00", "2026-11-30 22:00"}, // closed until Monday night
		{"2026-11-28 22:30", "2026-11-30 22:00"}, // Saturday night is not listed
		{"2026-11-30 03:00", "2026-11-30 22:00"}, // Monday 03:00 is Sunday's night
		{"2026-12-01 02:00", "2026-12-01 02:00"}, // Tuesday 02:00 is Monday's night
		{"2026-12-31 23:00", "2026-12-31 23:00"}, // Thursday night across the year
		{"2027-01-01 05:00", "2027-01-01 05:00"},
	} {
		at := kst(c.at)
		want := kst(c.next)
		if got := w.NextOpen(at, nil); !got.Equal(want) {
			t.Errorf("NextOpen(%s KST) = %s, want %s", c.at, got.In(seoul).Format("Mon 2006-01-02 15:04"), want.Format("Mon 2006-01-02 15:04"))
		}
		if open := w.Open(at, nil); open != (c.at == c.next) {
			t.Errorf("Open(%s KST) = %v", c.at, open)
		}
	}
	// The same instant judged in a message's own zone (from_message): 2026-11-27 13:30 UTC
	// is 22:30 in Seoul (open) and 08:30 in New York (closed until 22:00 there).
	wm := w
	wm.FromMessage, wm.Zone = true, time.UTC
	at := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	ny := zone(t, "America/New_York")
	if !wm.Open(at, wm.Location(seoul)) || wm.Open(at, wm.Location(ny)) {
		t.Error("from_message: the message's zone does not decide")
	}
	if got, want := wm.NextOpen(at, wm.Location(ny)), time.Date(2026, 11, 27, 22, 0, 0, 0, ny); !got.Equal(want) {
		t.Errorf("from_message New York: NextOpen = %v, want %v", got, want)
	}
	if wm.Location(nil) != time.UTC {
		t.Error("a message without a zone does not fall back to the window's")
	}
}

// TestDaylightSaving: a window starting at a wall-clock time that the spring-forward night
// skips opens at the change; the repeated hour of the fall-back night is open both times.
func TestDaylightSaving(t *testing.T) {
	t.Parallel()
	ny := zone(t, "America/New_York")
	w := Window{Set: true, From: clock("02:30"), To: clock("04:00"), Zone: ny}
	// 2026-03-08: 02:00 EST → 03:00 EDT (07:00 UTC).
	before := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC) // 01:00 EST
	if got, want := w.NextOpen(before, nil), time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("spring forward: NextOpen = %v, want %v (03:00 EDT, the change)", got.In(ny), want.In(ny))
	}
	// The day after, 02:30 EDT exists again.
	if got, want := w.NextOpen(time.Date(2026, 3, 9, 5, 0, 0, 0, time.UTC), nil), time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("day after: NextOpen = %v, want %v", got.In(ny), want.In(ny))
	}
	// 2026-11-01: 02:00 EDT → 01:00 EST; 01:15 happens twice, both inside 01:00–02:00.
	w2 := Window{Set: true, From: clock("01:00"), To: clock("02:00"), Zone: ny}
	first := time.Date(2026, 11, 1, 5, 15, 0, 0, time.UTC)  // 01:15 EDT
	second := time.Date(2026, 11, 1, 6, 15, 0, 0, time.UTC) // 01:15 EST
	if !w2.Open(first, nil) || !w2.Open(second, nil) {
		t.Error("fall back: the repeated hour is not open both times")
	}
}

// TestNextOpenIsTheFirstOpenInstant checks NextOpen against a minute-by-minute scan over
// two weeks around both DST changes of 2026, in zones with and without DST and one with a
// 30-minute offset: it is open, not before t, and no earlier minute is open.
func TestNextOpenIsTheFirstOpenInstant(t *testing.T) {
	t.Parallel()
	windows := []Window{
		{Set: true, Days: days("mon-fri"), From: clock("08:00"), To: clock("21:00")},
		{Set: true, Days: days("fri-mon"), From: clock("22:30"), To: clock("02:30")},
		{Set: true, Days: days("sun"), From: clock("00:00"), To: clock("24:00")},
		{Set: true, From: clock("02:30"), To: clock("03:30")},
		{Set: true, Days: days("wed"), From: clock("23:00"), To: clock("01:00")},
	}
	for _, zn := range []string{"Asia/Seoul", "America/New_York", "Europe/Berlin", "Australia/Adelaide", "UTC"} {
		loc := zone(t, zn)
		for _, start := range []time.Time{time.Date(2026, 3, 1, 0, 7, 0, 0, time.UTC), time.Date(2026, 10, 20, 0, 7, 0, 0, time.UTC)} {
			for wi, w := range windows {
				w.Zone = loc
				// Scan backwards so each minute's answer is the next open minute seen so far.
				const minutes = 14 * 24 * 60
				next := time.Time{}
				for i := minutes; i >= 0; i-- {
					at := start.Add(time.Duration(i) * time.Minute)
					if w.Open(at, nil) {
						next = at
					}
					if next.IsZero() {
						continue
					}
					got := w.NextOpen(at, nil)
					// A window opening at a DST change opens at the change, which is on the
					// hour: the scan (minute 7 of each hour) finds the next minute after it.
					if got.After(next) || next.Sub(got) >= time.Minute || !w.Open(got, nil) || got.Before(at) {
						t.Fatalf("%s window %d (%s) at %v: NextOpen = %v, first open minute %v", zn, wi, w, at.In(loc), got.In(loc), next.In(loc))
					}
				}
			}
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []string
		want uint8
	}{
		{[]string{"mon-fri"}, 0b0111110},
		{[]string{"sat", "Sun"}, 0b1000001},
		{[]string{"fri-mon"}, 0b1100011},
		{[]string{"tuesday", "thu"}, 0b0010100},
	} {
		if got, err := ParseDays(c.in); err != nil || got != c.want {
			t.Errorf("ParseDays(%q) = %07b, %v; want %07b", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"mo", "monx", "mon-", "funday"} {
		if _, err := ParseDays([]string{bad}); err == nil {
			t.Errorf("ParseDays(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"8:00", "24:01", "12:60", "ab:cd", "-1:00", "08:00:00", ""} {
		if _, err := ParseClock(bad); err == nil {
			t.Errorf("ParseClock(%q) accepted", bad)
		}
	}
	if d, err := ParseClock("24:00"); err != nil || d != 24*time.Hour {
		t.Errorf("24:00: %v %v", d, err)
	}
	for _, bad := range []string{"", "Local", "Mars/Olympus", "/etc/localtime", "../../etc/passwd"} {
		if _, err := LoadZone(bad); err == nil {
			t.Errorf("LoadZone(%q) accepted", bad)
		}
	}
	if (Window{}).Open(time.Time{}, nil) != true || !(Window{}).NextOpen(time.Unix(5, 0), nil).Equal(time.Unix(5, 0)) {
		t.Error("the zero Window is not always open")
	}
}

// FuzzNextOpen: for any window, zone and instant, NextOpen is open, not before t, within
// 8 days, and Open(t) iff NextOpen(t) == t.
func FuzzNextOpen(f *testing.F) {
	f.Add(uint8(0x3e), uint16(22*60), uint16(6*60), int64(1_795_000_000), uint8(0))
	f.Add(uint8(0x01), uint16(150), uint16(210), int64(1_772_949_600), uint8(1))
	zs := []string{"Asia/Seoul", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu"}
	f.Fuzz(func(t *testing.T, d uint8, from, to uint16, unix int64, zi uint8) {
		from, to = from%1440, to%1441
		if from == to || unix < 0 || unix > 4_000_000_000 {
			return
		}
		w := Window{Set: true, Days: d & AllDays, From: time.Duration(from) * time.Minute, To: time.Duration(to) * time.Minute, Zone: zone(t, zs[int(zi)%len(zs)])}
		at := time.Unix(unix, 0)
		got := w.NextOpen(at, nil)
		if got.Before(at) || got.Sub(at) > 8*24*time.Hour || !w.Open(got, nil) {
			t.Fatalf("%s at %v: NextOpen %v (open %v)", w, at.In(w.Zone), got.In(w.Zone), w.Open(got, nil))
		}
		if w.Open(at, nil) != got.Equal(at) {
			t.Fatalf("%s at %v: Open %v but NextOpen %v", w, at.In(w.Zone), w.Open(at, nil), got.In(w.Zone))
		}
	})
}
