package cli

import (
	"testing"

	"github.com/sluice-io/sluice/client"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]client.Rate{
		"5/s":       {Unit: "second", RequestsPerUnit: 5},
		"5/second":  {Unit: "second", RequestsPerUnit: 5},
		"5/seconds": {Unit: "second", RequestsPerUnit: 5},
		"300/m":     {Unit: "minute", RequestsPerUnit: 300},
		"300/mins":  {Unit: "minute", RequestsPerUnit: 300},
		"10/h":      {Unit: "hour", RequestsPerUnit: 10},
		"1/day":     {Unit: "day", RequestsPerUnit: 1},
		"7/w":       {Unit: "week", RequestsPerUnit: 7},
		"10/30s":    {Interval: "30s", RequestsPerUnit: 10},
		"10/1m30s":  {Interval: "1m30s", RequestsPerUnit: 10},
		"10/500ms":  {Interval: "500ms", RequestsPerUnit: 10},
		" 0/s ":     {Unit: "second", RequestsPerUnit: 0},
	} {
		got, err := parseRate(in)
		if err != nil || *got != want {
			t.Errorf("parseRate(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil && in == "10/30s" && formatRate(got) != "10/30s" {
			t.Errorf("formatRate(%+v) = %q", got, formatRate(got))
		}
	}
	for _, in := range []string{"5", "5/", "/s", "x/s", "-1/s", "5/fortnight", "5/-3s"} {
		if r, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) = %+v, want an error", in, r)
		}
	}
}

// Whatever a person types, parseRate never panics, and what it accepts it writes back
// (formatRate) in a form it reads as the same rate.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"5/s", "300/minute", "10/30s", "1/1m30s", "7/weeks", "0/h", "5/ms", "5//s", "-1/s", "9223372036854775807/s", "5/1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRate(s)
		if err != nil {
			return
		}
		if r.RequestsPerUnit < 0 || (r.Unit == "") == (r.Interval == "") {
			t.Fatalf("parseRate(%q) = %+v", s, r)
		}
		back, err := parseRate(formatRate(r))
		if err != nil || *back != *r {
			t.Fatalf("parseRate(%q) = %+v, written %q, read back %+v, %v", s, r, formatRate(r), back, err)
		}
	})
}
