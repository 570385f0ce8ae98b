package process_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/process"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "512KiB": 512 << 10, "1MiB": 1 << 20, "8GiB": 8 << 30, "2TiB": 2 << 40,
		"1MB": 1_000_000, "10 GB": 10_000_000_000, "4096B": 4096, " 3KiB ": 3072,
	} {
		if got, err := process.ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "1XB", "1.5GiB", "GiB", "9999999TiB"} {
		if _, err := process.ParseBytes(in); err == nil || !strings.Contains(err.Error(), "want a number of bytes") {
			t.Errorf("ParseBytes(%q): %v, want an error saying what a size looks like", in, err)
		}
	}
	for n, want := range map[int64]string{0: "0", 1 << 30: "1GiB", 1536 << 10: "1536KiB", 1000: "1000", 1 << 20: "1MiB"} {
		if got := process.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestFlagSet: the types every binary's flags use — a bool alone means true, lists drop
// blanks, the environment fills what the command line does not give, the flag wins, and
// errors name the flag or the variable with the bad value.
func TestFlagSet(t *testing.T) {
	t.Parallel()
	type cfg struct {
		on    bool
		n     int
		d     time.Duration
		size  int64
		list  []string
		text  string
		count int64
	}
	parse := func(env map[string]string, args ...string) (cfg, *process.FlagSet, error) {
		var c cfg
		f := process.NewFlagSet("test", func(k string) string { return env[k] }, io.Discard)
		f.Bool(&c.on, "on", "SLUICE_ON", false, "")
		f.Int(&c.n, "n", "SLUICE_N", 3, "")
		f.Duration(&c.d, "d", "SLUICE_D", 5*time.Minute, "")
		f.Bytes(&c.size, "size", "SLUICE_SIZE", 1<<20, "")
		f.List(&c.list, "list", "SLUICE_LIST", "a,b", "")
		f.String(&c.text, "text", "SLUICE_TEXT", "x", "")
		f.Int64(&c.count, "count", "SLUICE_COUNT", 7, "")
		return c, f, f.Parse(args)
	}
	c, f, err := parse(nil)
	if err != nil || c.on || c.n != 3 || c.d != 5*time.Minute || c.size != 1<<20 || strings.Join(c.list, "|") != "a|b" || c.text != "x" || c.count != 7 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if got := f.Flags(); len(got) != 7 || got[2].Default != "5m" || got[3].Default != "1MiB" || got[3].Env != "SLUICE_SIZE" {
		t.Fatalf("Flags(): %+v", got)
	}
	c, _, err = parse(map[string]string{"SLUICE_ON": "true", "SLUICE_N": "4", "SLUICE_SIZE": "2GiB", "SLUICE_LIST": " x, ,y "}, "-n", "5")
	if err != nil || !c.on || c.n != 5 || c.size != 2<<30 || strings.Join(c.list, "|") != "x|y" {
		t.Fatalf("environment under flags: %+v %v", c, err)
	}
	if c, _, err = parse(nil, "-on"); err != nil || !c.on {
		t.Fatalf("-on alone: %+v %v", c, err)
	}
	if c, _, err = parse(map[string]string{"SLUICE_ON": "true"}, "-on=false"); err != nil || c.on {
		t.Fatalf("-on=false over SLUICE_ON=true: %+v %v", c, err)
	}
	for _, bad := range []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{nil, []string{"-n", "many"}, []string{"-n", `"many"`}},
		{nil, []string{"-size", "1.5GiB"}, []string{"-size", `"1.5GiB"`}},
		{nil, []string{"-d", "5"}, []string{"-d", `"5"`}},
		{nil, []string{"-on", "true"}, []string{"-on=true"}},
		{map[string]string{"SLUICE_SIZE": "big"}, nil, []string{"SLUICE_SIZE", `"big"`, "-size"}},
		{map[string]string{"SLUICE_ON": "maybe"}, nil, []string{"SLUICE_ON", `"maybe"`, "-on"}},
	} {
		_, _, err := parse(bad.env, bad.args...)
		for _, w := range bad.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: %v, want an error with %s", bad.env, bad.args, err, w)
			}
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if code := process.ExitCode("x", nil, &out); code != 0 || out.Len() != 0 {
		t.Errorf("nil: %d %q", code, out.String())
	}
	if code := process.ExitCode("x", process.UsageError(errors.New("-n: bad")), &out); code != 2 || out.String() != "x: -n: bad\n" {
		t.Errorf("usage: %d %q", code, out.String())
	}
	out.Reset()
	if code := process.ExitCode("x", errors.New("listen: busy"), &out); code != 1 || out.String() != "x: listen: busy\n" {
		t.Errorf("runtime: %d %q", code, out.String())
	}
}
