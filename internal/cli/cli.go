package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/process"
)

// Exit codes of the command (see the package doc and `sluice help`).
const (
	ExitOK           = 0 // done
	ExitRefused      = 1 // the server said no (or `check` found problems)
	ExitUsage        = 2 // the command line is wrong
	ExitUnreachable  = 3 // cannot reach the ingress, or it cannot serve now
	ExitUnauthorized = 4 // the admin token is missing or not allowed
)

// DefaultURL is the ingress the command talks to without SLUICE_URL or --url: where
// `sluice dev` and `make run` listen.
const DefaultURL = "http://localhost:8080"

// DefaultTimeout bounds one command, retries included (--timeout).
const DefaultTimeout = 30 * time.Second

// Main is the sluice command. The zero value reads nothing and writes nowhere; cmd/sluice
// sets the process's streams and environment.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (SLUICE_URL, SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_TOKEN_FILE);
	// nil reads none.
	Getenv func(string) string
	// Terminal reports whether a person can answer a question on Stdin (purge asks one).
	// Nil: whether Stdin is a terminal (it answers the terminal ioctl; /dev/null, a
	// character device, does not).
	Terminal func() bool
	// Dev runs `sluice dev ARGS…` (the dev stack: embedded NATS, in-process store and
	// drainer, demo sink) and returns its exit code. Nil in a binary without the dev stack.
	Dev func(ctx context.Context, args []string) int
	// DevFlags are the flags of `sluice dev`, for `sluice help dev` and `sluice dev -h`.
	DevFlags []process.Flag
	// HTTPClient makes the requests; nil makes one with the --timeout.
	HTTPClient *http.Client
}

// verb is one subcommand.
type verb struct {
	name    string
	args    string // the synopsis after the name
	summary string
	run     func(m *Main, ctx context.Context, args []string) error
}

var verbs []verb

func init() {
	// Assigned here, not in the declaration: the verbs refer to usage, which reads verbs.
	verbs = []verb{
		{"queues", "", "list the queue rules with their depth and outflow", (*Main).queues},
		{"queue", "NAME", "show one queue: live settings, rules-file values, ETag", (*Main).queue},
		{"tune", "NAME [RATE] [--capacity N] [--total-outflow RATE] [--restore F,…] [--reset] [--force] | NAME --key K [RATE] [--for D | --until T] [--reset] | NAME --keys-file FILE", "change a queue live (RATE like 5/s, 300/m, 10/30s); refused if someone changed it since it was read; --key steers one key, --keys-file many (CSV key,outflow[,for])", (*Main).tune},
		{"pause", "NAME", "stop delivering a queue (admission continues up to capacity)", (*Main).pause},
		{"resume", "NAME", "deliver a paused queue again", (*Main).resume},
		{"purge", "NAME [--key KEY] [--yes]", "delete the messages waiting in a queue (or one key); asks first", (*Main).purge},
		{"keys", "NAME [--top N]", "the deepest keys of a queue", (*Main).keys},
		{"dead", "[--queue Q] [--limit N] [--all]", "list dead messages, oldest first", (*Main).dead},
		{"replay", "ID | --queue Q [--limit N]", "put dead messages back into their queue", (*Main).replay},
		{"status", "ID", "where a message is", (*Main).status},
		{"cancel", "ID", "take back a message not delivered yet (queued, scheduled, parked or waiting for a retry)", (*Main).cancel},
		{"submit", "DOMAIN KEY=VALUE… --payload @FILE|-|JSON [--idempotency-key K] [--delay D | --deliver-at T] [--ttl D] [--header 'Name: value']…", "submit a message", (*Main).submit},
		{"rules", "", "the rules in force on the ingress", (*Main).rules},
		{"check", "RULES… [--merge-domain-config]", "validate rules files or directories offline", (*Main).check},
		{"dev", "[FLAGS]", "run the dev stack (embedded NATS, store, drainer, demo sink)", (*Main).dev},
		{"version", "", "print the version", (*Main).version},
		{"help", "[VERB]", "this help, or a verb's", (*Main).help},
	}
}

// Verbs returns the names of the verbs, in the order of `sluice help`.
func Verbs() []string {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = v.name
	}
	return names
}

// Run runs the command line args (without the program name) and returns the exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		m.usage(m.stderr())
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	for _, v := range verbs {
		if v.name == name {
			return m.exit(v.run(m, ctx, args[1:]))
		}
	}
	fmt.Fprintf(m.stderr(), "sluice: unknown verb %q; run `sluice help`\n", name)
	return ExitUsage
}

// exitError is an error with its exit code and a message that says what to do.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

// exit writes err, explained, and returns its exit code.
func (m *Main) exit(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(m.stderr(), "sluice: "+unprefixed(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintln(m.stderr(), "sluice: "+errText(err))
	return ExitRefused
}

// errText is err's text without the "sluice: " or "client: " the client's errors begin
// with: the command prefixes its messages with "sluice: " itself, once.
func errText(err error) string { return unprefixed(err.Error()) }

func unprefixed(s string) string {
	for {
		t := strings.TrimPrefix(strings.TrimPrefix(s, "sluice: "), "client: ")
		if t == s {
			return s
		}
		s = t
	}
}

func (m *Main) stdout() io.Writer { return orDiscard(m.Stdout) }
func (m *Main) stderr() io.Writer { return orDiscard(m.Stderr) }

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func (m *Main) getenv(k string) string {
	if m.Getenv == nil {
		return ""
	}
	return m.Getenv(k)
}

func (m *Main) terminal() bool {
	if m.Terminal != nil {
		return m.Terminal()
	}
	f, ok := m.Stdin.(*os.File)
	return ok && isTerminal(f.Fd())
}

// common holds the flags every verb that talks to an ingress takes.
type common struct {
	url, token, tokenFile, output string
	submitToken                   string
	timeout                       time.Duration
	// rec keeps the body of the ingress's last 2xx answer: -o json writes it as sent.
	rec *recorder
}

// flags returns the flag set of a verb; with c, the connection and output flags too.
func (m *Main) flags(name string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by parse, help by m.help
	if c != nil {
		fs.StringVar(&c.url, "url", "", "the ingress `URL` (default $SLUICE_URL, else "+DefaultURL+")")
		fs.StringVar(&c.token, "token", "", "admin bearer `token` (default $SLUICE_ADMIN_TOKEN)")
		fs.StringVar(&c.tokenFile, "token-file", "", "read the admin token from `file` (default $SLUICE_ADMIN_TOKEN_FILE)")
		fs.StringVar(&c.submitToken, "submit-token", "", "bearer `token` of submit and status, for an ingress run with -submit-tokens (default $SLUICE_SUBMIT_TOKEN)")
		fs.StringVar(&c.output, "o", "table", "output: `table|json` (aligned tables for people, JSON for scripts)")
		fs.DurationVar(&c.timeout, "timeout", DefaultTimeout, "give up after this long, retries included")
	}
	return fs
}

// parse parses flags placed anywhere among the positional arguments (`purge orders --yes`
// as well as `purge --yes orders`) and returns the positional ones. After "--" every
// argument is positional.
func (m *Main) parse(fs *flag.FlagSet, args []string, c *common) ([]string, error) {
	var pos []string
	for {
		// A negative number ("-5/s") is an argument, not a flag: parse up to it, then take it
		// as a positional argument, so that the verb can say what is wrong with it.
		head, neg := args, negativeAt(fs, args)
		if neg >= 0 {
			head = args[:neg]
		}
		if err := fs.Parse(head); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				m.verbUsage(m.stdout(), strings.TrimPrefix(fs.Name(), "sluice "))
				return nil, &exitError{code: ExitOK}
			}
			name := strings.TrimPrefix(fs.Name(), "sluice ")
			return nil, usageErr("%s: %v; run `sluice help %s`", name, err, name)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			if neg < 0 {
				break
			}
			pos = append(pos, args[neg])
			args = args[neg+1:]
			continue
		}
		n := len(head) - len(rest)
		if n > 0 && head[n-1] == "--" { // negativeAt stops at "--": head is every argument
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = args[n+1:]
	}
	if c != nil && c.output != "table" && c.output != "json" {
		return nil, usageErr("-o %q: want table or json", c.output)
	}
	return pos, nil
}

// negativeAt returns the index of the first argument that is a negative number ("-5",
// "-5/s") rather than a flag (the flag package reads it as the unknown flag "-5/s"), or -1.
// The value of a flag that takes one ("--total-outflow -5/s") is the flag's; after "--"
// everything is an argument anyway.
func negativeAt(fs *flag.FlagSet, args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return -1
		}
		if len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9' {
			return i
		}
		if len(a) > 1 && a[0] == '-' && !strings.Contains(a, "=") {
			if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil && !isBoolFlag(f) {
				i++ // its value follows, whatever it looks like
			}
		}
	}
	return -1
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// connect returns the client of the flags and environment, and the URL it talks to.
func (m *Main) connect(c *common) (*client.Client, string, error) {
	u := firstNonEmpty(c.url, m.getenv("SLUICE_URL"), DefaultURL)
	token := firstNonEmpty(c.token, m.getenv("SLUICE_ADMIN_TOKEN"))
	if file := firstNonEmpty(c.tokenFile, m.getenv("SLUICE_ADMIN_TOKEN_FILE")); token == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, u, usageErr("reading the admin token: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	hc := &http.Client{Timeout: c.timeout}
	if m.HTTPClient != nil {
		copied := *m.HTTPClient
		hc = &copied
	}
	c.rec = &recorder{base: hc.Transport}
	hc.Transport = c.rec
	// A person waits at the terminal: a few quick retries, then an answer; a 429 is
	// reported at once rather than waited out.
	submitToken := firstNonEmpty(c.submitToken, m.getenv("SLUICE_SUBMIT_TOKEN"))
	cl, err := client.New(u, client.WithHTTPClient(hc), client.WithAdminToken(token), client.WithSubmitToken(submitToken), client.WithUserAgent("sluice-cli/1"),
		client.WithMaxAttempts(3), client.WithMaxRetryWait(10*time.Second), client.WithOverLimitRetry(false))
	if err != nil {
		return nil, u, usageErr("--url / SLUICE_URL %q: want http(s)://host[:port][/prefix]", u)
	}
	return cl, u, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// withTimeout bounds a command by --timeout.
func withTimeout(ctx context.Context, c *common) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// explain turns an error of the client into what to do about it, with its exit code.
func explain(err error, url string) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var pe *client.ProblemError
	detail := errText(err)
	if errors.As(err, &pe) {
		detail = errText(pe)
	}
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, client.ErrUnauthorized) && pe != nil && pe.Status == http.StatusForbidden:
		return &exitError{ExitUnauthorized, "the admin token is not allowed to do this (" + detail + "); use a token with the admin scope"}
	case errors.Is(err, client.ErrUnauthorized):
		return &exitError{ExitUnauthorized, "the ingress at " + url + " refused the request without a valid admin token (" + detail + "); set SLUICE_ADMIN_TOKEN (or --token, --token-file) to its -admin-token"}
	case errors.Is(err, client.ErrIdempotencyKeyReused):
		return &exitError{ExitRefused, detail + "; submit new work under a new --idempotency-key"}
	case errors.Is(err, client.ErrNoRule):
		return &exitError{ExitRefused, "no rule matches (" + detail + "); run `sluice rules` to see the domains and descriptors"}
	case errors.Is(err, client.ErrNotFound):
		return &exitError{ExitRefused, "not found: " + detail}
	case errors.Is(err, client.ErrOverLimit):
		return &exitError{ExitRefused, errText(err)}
	case errors.As(err, &dns): // before ErrUnavailable, which an unreachable ingress matches too
		return &exitError{ExitUnreachable, "cannot find host " + dns.Name + " of " + url + "; check SLUICE_URL or --url"}
	case errors.As(err, &op) && op.Op == "dial":
		return &exitError{ExitUnreachable, "cannot reach the ingress at " + url + " (" + op.Err.Error() + "); is it running? Set SLUICE_URL or --url to where it listens"}
	case errors.Is(err, client.ErrUnavailable):
		return &exitError{ExitUnreachable, "the ingress at " + url + " cannot serve now (" + detail + "); retry in a moment"}
	case pe != nil:
		return &exitError{ExitRefused, detail}
	case errors.Is(err, context.DeadlineExceeded):
		return &exitError{ExitUnreachable, "no answer from the ingress at " + url + " in time (--timeout); is it overloaded or unreachable?"}
	case errors.Is(err, context.Canceled):
		return &exitError{ExitUnreachable, "interrupted"}
	}
	if errors.Is(err, client.ErrInvalid) { // refused by the client before sending
		return &exitError{ExitUsage, errText(err)}
	}
	return &exitError{ExitUnreachable, "talking to the ingress at " + url + ": " + errText(err)}
}

// recorder is an http.RoundTripper that keeps the body of the last 2xx answer, so that
// -o json writes the API's objects as the ingress sent them, not as the client's types
// would re-encode them (with their zero values and without the fields they lack).
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	body []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	base := r.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	r.mu.Lock()
	r.body = b
	r.mu.Unlock()
	return resp, nil
}

// last returns the body of the last 2xx answer.
func (r *recorder) last() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body
}

// printRaw writes body, a JSON object the ingress sent, indented and otherwise as sent;
// extra adds members (name, value, name, value…) the API sends outside the body (the
// ETag header, say) after the body's own.
func (m *Main) printRaw(body []byte, extra ...any) error {
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return fmt.Errorf("the ingress's answer is not a JSON object: %.80q", body)
	}
	if len(extra) > 0 {
		obj := append([]byte(nil), body[:len(body)-1]...)
		sep := len(bytes.TrimSpace(obj[1:])) > 0
		for i := 0; i+1 < len(extra); i += 2 {
			k, _ := json.Marshal(extra[i])
			v, err := json.Marshal(extra[i+1])
			if err != nil {
				return err
			}
			if sep {
				obj = append(obj, ',')
			}
			obj = append(append(append(obj, k...), ':'), v...)
			sep = true
		}
		body = append(obj, '}')
	}
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return fmt.Errorf("the ingress's answer is not JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err := out.WriteTo(m.stdout())
	return err
}

// printJSON writes v as indented JSON.
func (m *Main) printJSON(v any) error {
	enc := json.NewEncoder(m.stdout())
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table returns a writer of aligned columns; Flush it.
func (m *Main) table() *tabwriter.Writer {
	return tabwriter.NewWriter(m.stdout(), 0, 0, 2, ' ', 0)
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprint(w, `sluice — operate a sluice ingress from the command line.

Usage: sluice VERB [ARGS] [FLAGS]   (flags may follow or precede the arguments)

Verbs:
`)
	for _, v := range verbs {
		fmt.Fprintf(w, "  %s\n        %s\n", strings.TrimSpace(v.name+" "+v.args), v.summary)
	}
	fmt.Fprint(w, `
Connection (every verb that talks to an ingress):
  --url URL          the ingress (default $SLUICE_URL, else `+DefaultURL+`)
  --token T          admin bearer token (default $SLUICE_ADMIN_TOKEN)
  --token-file F     read the token from F (default $SLUICE_ADMIN_TOKEN_FILE)
  --submit-token T   bearer token of submit and status under -submit-tokens
                     (default $SLUICE_SUBMIT_TOKEN)
  -o table|json      aligned tables for people (default), JSON for scripts
  --timeout D        give up after D, retries included (default 30s)

Exit codes:
  0  done
  1  the server said no: not found, invalid, over limit, changed by someone else,
     a conflict; check: the rules have problems
  2  usage: unknown verb or flag, missing argument, purge without --yes off a terminal
  3  cannot reach the ingress, or it cannot serve now (refused, timeout, 502/503/504)
  4  not authorized (401, 403): set SLUICE_ADMIN_TOKEN

Run 'sluice help VERB' for a verb's flags.
`)
}

func (m *Main) verbUsage(w io.Writer, name string) bool {
	for _, v := range verbs {
		if v.name != name {
			continue
		}
		fmt.Fprintf(w, "Usage: sluice %s\n\n%s.\n", strings.TrimSpace(v.name+" "+v.args), v.summary)
		switch name {
		case "help", "version":
			return true
		case "dev":
			m.devUsage(w)
			return true
		}
		var c common
		cp := &c
		if name == "check" {
			cp = nil
		}
		fs := m.flags(name, cp)
		addVerbFlags(name, fs)
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, fs)
		return true
	}
	return false
}

// printFlags lists fs's flags as the top-level help and docs/cli.md spell them: a long
// name with two dashes (--delay), a one-letter name with one (-o).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  " + dashes(f.Name)
		if kind != "" {
			line += " " + kind
		}
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "0s" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s\n        %s\n", line, usage)
	})
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// devUsage lists the flags of `sluice dev`, each with its environment variable.
func (m *Main) devUsage(w io.Writer) {
	if len(m.DevFlags) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags (each also read from its environment variable; the flag wins):")
	for _, f := range m.DevFlags {
		def := "empty"
		if f.Default != "" {
			def = f.Default
		}
		fmt.Fprintf(w, "  %s\n        %s (env %s; default %s)\n", dashes(f.Name), f.Usage, f.Env, def)
	}
}

func (m *Main) help(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		m.usage(m.stdout())
		return nil
	}
	if !m.verbUsage(m.stdout(), args[0]) {
		return usageErr("unknown verb %q; run `sluice help`", args[0])
	}
	return nil
}

func (m *Main) version(_ context.Context, _ []string) error {
	fmt.Fprintln(m.stdout(), "sluice", process.Version()) // the binaries' one version string
	return nil
}

func (m *Main) dev(ctx context.Context, args []string) error {
	if m.Dev == nil {
		return usageErr("this binary was built without the dev stack; run `make run` from the repository")
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" { // help is not an error: exit 0, as `sluice help dev`
			m.verbUsage(m.stdout(), "dev")
			return nil
		}
	}
	if code := m.Dev(ctx, args); code != 0 {
		return &exitError{code: code}
	}
	return nil
}
