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
