package process

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

// A Flag documents one flag of a process: its name, its environment variable and its
// default as written on the command line. The README's flag tables are checked against
// these (flags_readme_test.go).
type Flag struct {
	Name    string // without the dash: "http"
	Env     string // "SLUICE_HTTP_ADDR"
	Default string // "" when the default is empty
	Usage   string
}

// FlagSet is a flag.FlagSet whose every flag has a SLUICE_* environment variable (the flag
// wins) and a default written once. A bad environment value is an error naming the
// variable, the flag it stands for and the value; a bad flag value is the flag package's
// "invalid value … for flag -name".
type FlagSet struct {
	fs     *flag.FlagSet
	getenv func(string) string
	list   []Flag
	envErr error
}

// NewFlagSet returns an empty FlagSet named name (the program) reading getenv (nil =
// os.Getenv) and writing -help to stderr.
func NewFlagSet(name string, getenv func(string) string, stderr io.Writer) *FlagSet {
	if getenv == nil {
		getenv = os.Getenv
	}
	if stderr == nil {
		stderr = io.Discard
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &FlagSet{fs: fs, getenv: getenv}
}

func (f *FlagSet) add(v flag.Value, name, env, def, usage string) {
	f.addKind(v, "", name, env, def, usage)
}

// addKind declares v; kind names its value in -help ("-max-body size").
func (f *FlagSet) addKind(v flag.Value, kind, name, env, def, usage string) {
	if err := v.Set(def); err != nil {
		panic(fmt.Sprintf("process: default of -%s: %v", name, err)) // a typo in this file
	}
	if s := f.getenv(env); s != "" {
		if err := v.Set(s); err != nil && f.envErr == nil {
			f.envErr = fmt.Errorf("%s: %w (the environment variable of -%s)", env, err, name)
		}
	}
	switch kind {
	case "string": // the flag package's own type, so that -help says "string"
		sv := v.(*stringValue)
		f.fs.StringVar((*string)(sv), name, string(*sv), usage+" (env "+env+")")
	case "":
		f.fs.Var(v, name, usage+" (env "+env+")")
	default:
		f.fs.Var(v, name, usage+" (`"+kind+"`; env "+env+")")
	}
	f.list = append(f.list, Flag{Name: name, Env: env, Default: def, Usage: usage})
}

// String declares a string flag.
func (f *FlagSet) String(p *string, name, env, def, usage string) {
	f.addKind((*stringValue)(p), "string", name, env, def, usage)
}

// Bool declares a bool flag: -name alone means true.
func (f *FlagSet) Bool(p *bool, name, env string, def bool, usage string) {
	f.add((*boolValue)(p), name, env, strconv.FormatBool(def), usage)
}

// Int declares an int flag.
func (f *FlagSet) Int(p *int, name, env string, def int, usage string) {
	f.addKind((*intValue)(p), "int", name, env, strconv.Itoa(def), usage)
}

// Int64 declares an int64 flag.
func (f *FlagSet) Int64(p *int64, name, env string, def int64, usage string) {
	f.addKind((*int64Value)(p), "int", name, env, strconv.FormatInt(def, 10), usage)
}

// Duration declares a time.Duration flag.
func (f *FlagSet) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.addKind((*durationValue)(p), "duration", name, env, formatDuration(def), usage)
}

// Bytes declares a byte-size flag: a whole number of bytes, or one with a unit (KiB, MiB, GiB, TiB;
// KB, MB, GB, TB are powers of 1000): 1048576, 512KiB, 1GiB.
func (f *FlagSet) Bytes(p *int64, name, env string, def int64, usage string) {
	f.addKind((*bytesValue)(p), "size", name, env, FormatBytes(def), usage)
}

// List declares a comma-separated list flag; blanks around items and empty items are dropped.
func (f *FlagSet) List(p *[]string, name, env, def, usage string) {
	f.addKind((*listValue)(p), "list", name, env, def, usage)
}

// BoolAction declares a bool flag that asks for an action (-version): no environment
// variable, not listed by Flags.
func (f *FlagSet) BoolAction(p *bool, name, usage string) { f.fs.Var((*boolValue)(p), name, usage) }

// ListAction declares a list flag that asks for an action (-check-config): no
// environment variable, not listed by Flags.
func (f *FlagSet) ListAction(p *[]string, name, usage string) {
	f.fs.Var((*listValue)(p), name, usage+" (`list`)")
}

// Flags lists the flags declared so far (not the actions declared on FS).
func (f *FlagSet) Flags() []Flag { return f.list }

// Parse reads args; an environment error comes first, as it was met first.
func (f *FlagSet) Parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.envErr != nil {
		return f.envErr
	}
	if f.fs.NArg() > 0 {
		if i := len(args) - f.fs.NArg(); i > 0 && (args[i] == "true" || args[i] == "false") && strings.HasPrefix(args[i-1], "-") {
			// "-drain true": a bool flag takes its value after "=", and the flag package
			// stopped at "true".
			return fmt.Errorf("unexpected arguments: %s (a flag that is on or off takes its value after =, as %s=%s, or alone to mean true)",
				strings.Join(f.fs.Args(), " "), args[i-1], args[i])
		}
		return fmt.Errorf("unexpected arguments: %s", strings.Join(f.fs.Args(), " "))
	}
	return nil
}

// Given reports whether the flag was given on the command line or in its environment variable.
func (f *FlagSet) Given(name string) bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	for _, d := range f.list {
		if d.Name == name && f.getenv(d.Env) != "" {
			given = true
		}
	}
	return given
}

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }

type boolValue bool

func (b *boolValue) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true or false, got %q", v)
	}
	*b = boolValue(on)
	return nil
}
func (b *boolValue) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolValue) IsBoolFlag() bool { return true } // -drain alone means true

type intValue int

func (n *intValue) Set(v string) error {
	i, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("want a whole number, got %q", v)
	}
	*n = intValue(i)
	return nil
}
func (n *intValue) String() string { return strconv.Itoa(int(*n)) }

type int64Value int64

func (n *int64Value) Set(v string) error {
	i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number, got %q", v)
	}
	*n = int64Value(i)
	return nil
}
func (n *int64Value) String() string { return strconv.FormatInt(int64(*n), 10) }

type durationValue time.Duration

func (d *durationValue) Set(v string) error {
	x, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("want a duration such as 500ms, 10s, 5m or 24h, got %q", v)
	}
	*d = durationValue(x)
	return nil
}
func (d *durationValue) String() string { return formatDuration(time.Duration(*d)) }

// formatDuration writes 0 as "0s" and drops time.Duration's trailing zero units ("5m", not "5m0s").
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

type bytesValue int64

func (b *bytesValue) Set(v string) error {
	n, err := ParseBytes(v)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}
func (b *bytesValue) String() string { return FormatBytes(int64(*b)) }

var errBytes = errors.New("want a number of bytes such as 1048576, 512KiB, 1MiB or 8GiB")

// ParseBytes reads a byte size: a whole number of bytes, or one with a unit (B, KiB,
// MiB, GiB, TiB; KB, MB, GB, TB are powers of 1000) — the rules file's sizes
// (rules.ParseByteSize), one table of units for both.
func ParseBytes(s string) (int64, error) {
	n, err := rules.ParseByteSize(s)
	if err != nil {
		return 0, fmt.Errorf("%w, got %q", errBytes, s)
	}
	return n, nil
}

// FormatBytes writes n in the largest binary unit that divides it: 1GiB, 1536KiB, 1000.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

type listValue []string

func (l *listValue) Set(v string) error {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	*l = out
	return nil
}
func (l *listValue) String() string { return strings.Join(*l, ",") }
