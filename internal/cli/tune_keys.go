package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/window"
)

// keyOpts are the tune verb's per-key options.
type keyOpts struct {
	key, keysFile, until, window string
	forDur                       time.Duration
}

func bindKeyOpts(fs *flag.FlagSet, o *keyOpts) {
	fs.StringVar(&o.key, "key", "", "steer this one `KEY` of the queue instead of the whole queue (RATE, --for/--until, --reset)")
	fs.StringVar(&o.keysFile, "keys-file", "", "steer many keys from a CSV `FILE` of key,outflow[,for] (outflow: a RATE, paused or reset; - reads stdin)")
	fs.DurationVar(&o.forDur, "for", 0, "with --key: the override ends after this `DURATION` (24h) and the rule's value returns")
	fs.StringVar(&o.until, "until", "", "with --key: the override ends at this RFC 3339 `TIME`")
	fs.StringVar(&o.window, "window", "", "with --key: the key's own delivery `WINDOW` instead of the rule's, \"[DAYS] HH:MM-HH:MM ZONE\" (\"mon-fri 09:00-18:00 Europe/Paris\"; ZONE may be from_message [DEFAULT_ZONE]); rule: the rule's window again")
}

// tuneKeys runs `sluice tune NAME --key K [RATE]` and `sluice tune NAME --keys-file FILE`.
func (m *Main) tuneKeys(ctx context.Context, cl *client.Client, c *common, u, name string, rest []string, o *tuneOpts) error {
	switch {
	case o.key != "" && o.keysFile != "":
		return usageErr("tune %s: give --key or --keys-file, not both", name)
	case o.key == "" && o.keysFile == "":
		return usageErr("tune %s: --for, --until and --window go with --key", name)
	case o.capacity != nil || o.totalOutflow != "" || o.restore != "":
		return usageErr("tune %s: --capacity, --total-outflow and --restore tune the whole queue, not a key (a queue's capacity per key is one value for every key)", name)
	case o.forDur != 0 && o.until != "":
		return usageErr("tune %s: give --for or --until, not both", name)
	case o.forDur < 0:
		return usageErr("tune %s: --for must be > 0", name)
	}
	a := cl.Admin()
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	if o.keysFile != "" {
		if len(rest) > 0 {
			return usageErr("tune %s --keys-file: the rates are in the file, not on the command line", name)
		}
		if o.window != "" {
			return usageErr("tune %s --keys-file: the windows are in the file (a fourth column), not on the command line", name)
		}
		return m.tuneKeysFile(ctx, a, c, u, name, o.keysFile)
	}
	p := client.KeyPatch{For: o.forDur, Reset: o.reset}
	if len(rest) == 1 {
		r, err := parseRate(rest[0])
		if err != nil {
			return usageErr("%v", err)
		}
		p.Outflow = r
	}
	if o.until != "" {
		t, err := time.Parse(time.RFC3339, o.until)
		if err != nil {
			return usageErr("--until %q: want an RFC 3339 time like 2026-12-01T00:00:00Z", o.until)
		}
		p.Until = t
	}
	switch o.window {
	case "":
	case "rule":
		p.RestoreWindow = true
	default:
		w, err := parseWindowFlag(o.window)
		if err != nil {
			return usageErr("--window: %v", err)
		}
		p.Window = w
	}
	if (p.Outflow != nil || p.Window != nil) && p.For == 0 && p.Until.IsZero() {
		p.NoEnd = true // `tune NAME --key K RATE` without an end lasts until reset
	}
	if p.Reset && (p.Outflow != nil || p.Window != nil || p.RestoreWindow || p.For != 0 || !p.Until.IsZero()) {
		return usageErr("tune %s --key: --reset takes no RATE, --window, --for or --until", name)
	}
	if !p.Reset && p.Outflow == nil && p.Window == nil && !p.RestoreWindow && p.For == 0 && p.Until.IsZero() {
		return usageErr("tune %s --key %s: nothing to change; give a RATE or --window (with --for or --until to end it) or --reset", name, o.key)
	}
	k, err := a.TuneKey(ctx, name, o.key, p)
	if err != nil {
		return explain(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	tw := m.table()
	outflow := formatRate(k.Outflow)
	if k.Paused {
		outflow += " (paused)"
	}
	win := "always"
	if k.Window != nil {
		win = windowText(*k.Window)
	}
	for _, r := range [][2]string{{"queue", k.Queue}, {"key", k.Key}, {"outflow", outflow}, {"source", k.Source},
		{"window", win}, {"window source", k.WindowSource}, {"depth", fmt.Sprint(k.Depth)}} {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

var lineField = regexp.MustCompile(`^line (\d+)`)

// tuneKeysFile reads key,outflow[,for] lines and sends them at once. A refused line is
// reported with its line number in the file.
func (m *Main) tuneKeysFile(ctx context.Context, a *client.Admin, c *common, u, name, path string) error {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usageErr("--keys-file: %v", err)
		}
		defer f.Close()
		in = f
	}
	cr := csv.NewReader(in)
	cr.FieldsPerRecord = -1
	var lines []client.KeyLine
	var fileLine []int
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return usageErr("%s: %v", path, err)
		}
		if first && strings.EqualFold(strings.TrimSpace(rec[0]), "key") {
			continue // a header
		}
		if len(rec) < 2 || len(rec) > 4 {
			return usageErr("%s:%d: want key,outflow[,for[,window]] (got %d fields)", path, line, len(rec))
		}
		l := client.KeyLine{Key: rec[0]}
		if len(rec) == 4 && strings.TrimSpace(rec[3]) != "" {
			w, err := parseWindowFlag(rec[3])
			if err != nil {
				return usageErr("%s:%d: %v", path, line, err)
			}
			l.Window = w
		}
		switch v := strings.TrimSpace(rec[1]); strings.ToLower(v) {
		case "":
			if l.Window == nil {
				return usageErr("%s:%d: outflow: empty: give a rate, paused or reset (or a window in the fourth column)", path, line)
			}
		case "paused":
			l.Paused = true
		case "reset", "-":
			l.Reset = true
		default:
			r, err := parseRate(v)
			if err != nil {
				return usageErr("%s:%d: outflow: %v", path, line, err)
			}
			l.Outflow = r
		}
		if len(rec) == 3 && strings.TrimSpace(rec[2]) != "" {
			d, err := time.ParseDuration(strings.TrimSpace(rec[2]))
			if err != nil || d <= 0 {
				return usageErr("%s:%d: for: want a duration like 24h (got %q)", path, line, rec[2])
			}
			l.For = d
		}
		lines = append(lines, l)
		fileLine = append(fileLine, line)
	}
	if len(lines) == 0 {
		return usageErr("%s: no keys", path)
	}
	res, err := a.TuneKeys(ctx, name, lines)
	var pe *client.ProblemError
	if errors.As(err, &pe) && pe.Status == 400 {
		if mm := lineField.FindStringSubmatch(pe.Field); mm != nil {
			if n, _ := strconv.Atoi(mm[1]); n >= 1 && n <= len(fileLine) {
				field := strings.TrimPrefix(strings.TrimPrefix(pe.Field, mm[0]), ": ")
				// The detail is "N of M lines refused, nothing written; first: line X: why".
				summary, why, ok := strings.Cut(pe.Detail, "; first: "+mm[0]+": ")
				if !ok {
					summary, why = "nothing written", pe.Detail
				}
				return &exitError{ExitRefused, fmt.Sprintf("%s:%d: %s: %s (%s)", path, fileLine[n-1], field, why, summary)}
			}
		}
	}
	if err != nil {
		return explain(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	fmt.Fprintf(m.Stdout, "%s: %d keys set, %d reset (%d lines)\n", res.Queue, res.Set, res.Reset, res.Lines)
	return nil
}

// parseWindowFlag reads --window (and a keys file's fourth column) as the server does,
// so a typo is named here, before anything is sent.
func parseWindowFlag(text string) (*client.Window, error) {
	spec, err := window.ParseSpecText(text)
	if err != nil {
		return nil, err
	}
	if _, errs := spec.Window(); len(errs) > 0 {
		return nil, fmt.Errorf("window.%s: %s", errs[0].Field, errs[0].Message)
	}
	return &client.Window{Days: spec.Days, From: spec.From, To: spec.To, TimeZone: spec.TimeZone, DefaultTimeZone: spec.DefaultTimeZone}, nil
}

// windowText is w as --window takes it.
func windowText(w client.Window) string {
	return window.Spec{Days: w.Days, From: w.From, To: w.To, TimeZone: w.TimeZone, DefaultTimeZone: w.DefaultTimeZone}.Text()
}
