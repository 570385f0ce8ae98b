package window

import (
	"reflect"
	"testing"
)

// A window's text and object forms give the same Window, and SpecOf writes it back with
// days Monday first, runs as ranges.
func TestSpecTextRoundTrip(t *testing.T) {
	for text, want := range map[string]Spec{
		"mon-fri 09:00-18:00 Europe/Paris":           {Days: []string{"mon-fri"}, From: "09:00", To: "18:00", TimeZone: "Europe/Paris"},
		"22:00-06:00 Asia/Seoul":                     {From: "22:00", To: "06:00", TimeZone: "Asia/Seoul"},
		"sat,sun 10:00-16:00 from_message UTC":       {Days: []string{"sat", "sun"}, From: "10:00", To: "16:00", TimeZone: "from_message", DefaultTimeZone: "UTC"},
		"mon,tue,wed,sun 00:00-24:00 America/Denver": {Days: []string{"mon", "tue", "wed", "sun"}, From: "00:00", To: "24:00", TimeZone: "America/Denver"},
	} {
		s, err := ParseSpecText(text)
		if err != nil || !reflect.DeepEqual(s, want) || s.Text() != text {
			t.Errorf("%q: %+v %v", text, s, err)
			continue
		}
		w, errs := s.Window()
		if errs != nil {
			t.Errorf("%q: %v", text, errs)
			continue
		}
		back := SpecOf(w)
		w2, _ := back.Window()
		if !w2.Equal(w) {
			t.Errorf("%q: SpecOf %+v reads back as %v, want %v", text, back, w2, w)
		}
	}
	if got := SpecOf(Window{Days: 1<<1 | 1<<2 | 1<<3 | 1<<0, From: 1, To: 2, Set: true}).Days; !reflect.DeepEqual(got, []string{"mon-wed", "sun"}) {
		t.Errorf("days: %v", got)
	}
	for _, bad := range []string{"", "09:00-18:00", "mon-fri 0900 UTC", "09:00-18:00 UTC Europe/Paris"} {
		if _, err := ParseSpecText(bad); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
	if _, errs := (Spec{Days: []string{"mon", "xyz"}, From: "25:00", To: "18:00", TimeZone: "Local"}).Window(); len(errs) != 3 ||
		errs[0].Field != "days[1]" || errs[1].Field != "from" || errs[2].Field != "time_zone" {
		t.Errorf("errors: %+v", errs)
	}
}
