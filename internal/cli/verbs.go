package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/rules"
)

// Options of the verbs that have their own flags, bound by bind*; addVerbFlags binds
// them for `sluice help VERB`.
type (
	tuneOpts struct {
		capacity             *int64
		totalOutflow         string
		restore              string
		reset, force, paused bool
		keyOpts              // --key, --keys-file, --for, --until, --window (tune_keys.go)
	}
	purgeOpts struct {
		key string
		yes bool
	}
	keysOpts struct{ top int }
	deadOpts struct {
		queue string
		limit int
		all   bool
	}
	replayOpts struct {
		queue string
		limit int
	}
	submitOpts struct {
		payload, idemKey, deliverAt string
		delay, ttl                  time.Duration
		headers                     headerFlag
	}
	checkOpts struct{ merge bool }
)

func bindTune(fs *flag.FlagSet) *tuneOpts {
	o := &tuneOpts{}
	fs.Func("capacity", "set the most messages waiting per key (`N`)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("want a count")
		}
		o.capacity = &n
		return nil
	})
	fs.StringVar(&o.totalOutflow, "total-outflow", "", "set the outflow shared by all keys (`RATE`)")
	fs.StringVar(&o.restore, "restore", "", "give these `fields` back to the rules file: outflow,total_outflow,capacity,paused")
	fs.BoolVar(&o.reset, "reset", false, "drop every live change: the queue is again as the rules file says")
	fs.BoolVar(&o.force, "force", false, "change the queue even if someone else changed it since it was read (no If-Match)")
	bindKeyOpts(fs, &o.keyOpts)
	return o
}

func bindPurge(fs *flag.FlagSet) *purgeOpts {
	o := &purgeOpts{}
	fs.StringVar(&o.key, "key", "", "purge only this `key` of the queue")
	fs.BoolVar(&o.yes, "yes", false, "do not ask (required when not on a terminal)")
	return o
}

func bindKeys(fs *flag.FlagSet) *keysOpts {
	o := &keysOpts{}
	fs.IntVar(&o.top, "top", 20, "show the `N` deepest keys (at most 100)")
	return o
}

func bindDead(fs *flag.FlagSet) *deadOpts {
	o := &deadOpts{}
	fs.StringVar(&o.queue, "queue", "", "only this queue's dead messages")
	fs.IntVar(&o.limit, "limit", 0, "page size, 1 to 1000 (default: the server's, 100)")
	fs.BoolVar(&o.all, "all", false, "read every page, not only the first")
	return o
}

func bindReplay(fs *flag.FlagSet) *replayOpts {
	o := &replayOpts{}
	fs.StringVar(&o.queue, "queue", "", "replay the dead messages of this queue, oldest first")
	fs.IntVar(&o.limit, "limit", 0, "with --queue: at most `N` (default: the server's, 1000)")
	return o
}

func bindSubmit(fs *flag.FlagSet) *submitOpts {
	o := &submitOpts{}
	fs.StringVar(&o.payload, "payload", "", "the payload: `@FILE`, - (stdin) or JSON text (required)")
	fs.StringVar(&o.idemKey, "idempotency-key", "", "submit under this key (default: a new one, printed on failure)")
	fs.DurationVar(&o.delay, "delay", 0, "deliver no earlier than this long from now")
	fs.StringVar(&o.deliverAt, "deliver-at", "", "deliver no earlier than this RFC 3339 `time`")
	fs.DurationVar(&o.ttl, "ttl", 0, "dead letter if still waiting this long after admission")
	fs.Var(&o.headers, "header", "a header for the sink, as `'Name: value'` (repeatable)")
	return o
}

func bindCheck(fs *flag.FlagSet) *checkOpts {
	o := &checkOpts{}
	fs.BoolVar(&o.merge, "merge-domain-config", false, "let several documents define one domain (as the ingress's -merge-domain-config)")
	return o
}

func addVerbFlags(name string, fs *flag.FlagSet) {
	switch name {
	case "tune":
		bindTune(fs)
	case "purge":
		bindPurge(fs)
	case "keys":
		bindKeys(fs)
	case "dead":
		bindDead(fs)
	case "replay":
		bindReplay(fs)
	case "submit":
		bindSubmit(fs)
	case "check":
		bindCheck(fs)
	}
}

// headerFlag collects repeated --header "Name: value".
type headerFlag map[string]string

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want Name: value")
	}
	if *h == nil {
		*h = headerFlag{}
	}
	(*h)[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

// start parses a verb's command line: the common flags, the verb's (bind), and exactly
// nargs positional arguments (-1: any number). It returns the client too.
func (m *Main) start(name string, args []string, nargs int, bind func(*flag.FlagSet)) (*client.Client, *common, string, []string, error) {
	var c common
	fs := m.flags(name, &c)
	if bind != nil {
		bind(fs)
	}
	pos, err := m.parse(fs, args, &c)
	if err != nil {
		return nil, nil, "", nil, err
	}
	if nargs >= 0 && len(pos) != nargs {
		return nil, nil, "", nil, usageErr("%s wants %s; run `sluice help %s`", name, synopsis(name), name)
	}
	cl, u, err := m.connect(&c)
	return cl, &c, u, pos, err
}

func synopsis(name string) string {
	for _, v := range verbs {
		if v.name == name {
			if v.args == "" {
				return "no arguments"
			}
			return v.args
		}
	}
	return ""
}

func (m *Main) queues(ctx context.Context, args []string) error {
	cl, c, u, _, err := m.start("queues", args, 0, nil)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	qs, err := cl.Admin().Queues(ctx)
	if err != nil {
		return explain(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	tw := m.table()
	fmt.Fprintln(tw, "NAME\tDOMAIN\tDEPTH\tKEYS\tCAPACITY\tOUTFLOW\tTOTAL\tPAUSED\tIN FLIGHT\tPARKED\tDEAD\tDRAINED/S\tOLDEST\tOVERRIDDEN\tBREAKER")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\n", q.Name, q.Domain, q.Depth, q.ActiveKeys, q.Capacity,
			formatRate(q.Outflow), formatRate(q.TotalOutflow), yesNo(q.Paused), q.InFlight, q.Parked, q.Dead, q.DrainedPerSecond, formatAge(q.OldestAge), dash(strings.Join(q.Overridden, ",")),
			breakerState(q.Breaker))
	}
	return tw.Flush()
}

// breakerState is a rule's sink breaker in `sluice queues`: "-" without sink.breaker, else
// its state, with how many drainers' breakers are not closed.
func breakerState(b *client.Breaker) string {
	if b == nil {
		return "-"
	}
	n := 0
	for _, d := range b.Drainers {
		if d.State != "closed" {
			n++
		}
	}
	if n == 0 {
		return b.State
	}
	return fmt.Sprintf("%s (%d/%d)", b.State, n, len(b.Drainers))
}

// breakerDetail is the breaker row of `sluice queue NAME`: each drainer's state, since when
// and an open one's next probe.
func breakerDetail(b *client.Breaker) string {
	s := b.State
	for _, d := range b.Drainers {
		s += fmt.Sprintf("; %s %s since %s", d.Drainer, d.State, formatTime(d.Since))
		if !d.NextProbeAt.IsZero() {
			s += ", next probe " + formatTime(d.NextProbeAt)
		}
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (m *Main) queue(ctx context.Context, args []string) error {
	cl, c, u, pos, err := m.start("queue", args, 1, nil)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	q, err := cl.Admin().Queue(ctx, pos[0])
	if err != nil {
		return explainQueue(ctx, cl, err, u, pos[0])
	}
	return m.printQueue(c, q)
}

func (m *Main) printQueue(c *common, q *client.Queue) error {
	if c.output == "json" {
		// The ETag is the answer's header; -o json adds it to the queue as "etag".
		if q.ETag == "" {
			return m.printRaw(c.rec.last())
		}
		return m.printRaw(c.rec.last(), "etag", q.ETag)
	}
	tw := m.table()
	file := func(live, inFile string) string {
		if inFile == "" || inFile == live {
			return live
		}
		return live + "  (rules file: " + inFile + ")"
	}
	var fileCap, fileOut, fileTotal string
	if f := q.RulesFile; f != nil {
		fileCap, fileOut, fileTotal = fmt.Sprint(f.Capacity), formatRate(f.Outflow), formatRate(f.TotalOutflow)
	}
	rows := [][2]string{
		{"name", q.Name},
		{"domain", dash(q.Domain)},
		{"capacity", file(fmt.Sprint(q.Capacity), fileCap)},
		{"outflow", file(formatRate(q.Outflow), fileOut)},
		{"total outflow", file(formatRate(q.TotalOutflow), fileTotal)},
		{"paused", yesNo(q.Paused)},
		{"depth", fmt.Sprintf("%d in %d keys", q.Depth, q.ActiveKeys)},
		{"oldest", formatAge(q.OldestAge)},
		{"in flight", fmt.Sprintf("%d keys", q.InFlight)},
		{"parked", fmt.Sprint(q.Parked)},
		{"dead", fmt.Sprint(q.Dead)},
		{"drained/s", fmt.Sprintf("%.1f", q.DrainedPerSecond)},
		{"refused/s", fmt.Sprintf("%.1f", q.RefusedPerSecond)},
		{"overridden", dash(strings.Join(q.Overridden, ", "))},
		{"etag", dash(q.ETag)},
	}
	if !q.OverrideUpdatedAt.IsZero() {
		rows = append(rows, [2]string{"tuned at", formatTime(q.OverrideUpdatedAt)})
	}
	if q.Breaker != nil {
		rows = append(rows, [2]string{"breaker", breakerDetail(q.Breaker)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

func (m *Main) tune(ctx context.Context, args []string) error {
	var o *tuneOpts
	cl, c, u, pos, err := m.start("tune", args, -1, func(fs *flag.FlagSet) { o = bindTune(fs) })
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr("tune wants NAME [RATE]; run `sluice help tune`")
	}
	name := pos[0]
	if o.key != "" || o.keysFile != "" || o.forDur != 0 || o.until != "" || o.window != "" {
		return m.tuneKeys(ctx, cl, c, u, name, pos[1:], o)
	}
	var p client.Patch
	if len(pos) == 2 {
		if p.Outflow, err = parseOutflow("outflow", pos[1]); err != nil {
			return usageErr("%v", err)
		}
	}
	if o.totalOutflow != "" {
		if p.TotalOutflow, err = parseOutflow("--total-outflow", o.totalOutflow); err != nil {
			return usageErr("%v", err)
		}
	}
	p.Capacity = o.capacity
	if o.restore != "" {
		for _, f := range strings.Split(o.restore, ",") {
			p.Restore = append(p.Restore, strings.TrimSpace(f))
		}
	}
	if !o.reset && p.Outflow == nil && p.TotalOutflow == nil && p.Capacity == nil && len(p.Restore) == 0 {
		return usageErr("tune %s: nothing to change; give a RATE, --capacity, --total-outflow, --restore or --reset", name)
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	return m.patch(ctx, cl, c, u, name, p, o.reset, o.force)
}

// parseOutflow reads a rate the operator typed for what (outflow, --total-outflow): a
// negative one gets its own answer, not parseRate's "not a count".
func parseOutflow(what, s string) (*client.Rate, error) {
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return nil, fmt.Errorf("%s must be positive: %s", strings.TrimPrefix(what, "--"), strings.TrimSpace(s))
	}
	r, err := parseRate(s)
	if err != nil && what != "outflow" {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return r, err
}

// explainQueue is explain for a verb that names a queue: a name that is no queue rule is
// answered with the queue rules there are — and, when the name is a domain (`tune orders`
// where orders is the domain and its rules have names of their own), with that domain's
// rules — because the operator mistyped or confused a domain with a rule.
func explainQueue(ctx context.Context, cl *client.Client, err error, u, name string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return explain(err, u)
	}
	qs, lerr := cl.Admin().Queues(ctx)
	if lerr != nil {
		return explain(err, u)
	}
	if hint := unknownQueue(name, qs); hint != "" {
		return &exitError{ExitRefused, hint}
	}
	return explain(err, u)
}

// unknownQueue says what name is not, and which names there are; "" when name is one of
// qs (the 404 was of something else: a key, say).
func unknownQueue(name string, qs []client.Queue) string {
	var names, inDomain []string
	for _, q := range qs {
		if q.Name == name {
			return ""
		}
		names = append(names, q.Name)
		if q.Domain == name {
			inDomain = append(inDomain, q.Name)
		}
	}
	switch {
	case len(names) == 0:
		return fmt.Sprintf("no queue rule named %q: the ingress has no queue rules", name)
	case len(inDomain) > 0:
		return fmt.Sprintf("no queue rule named %q: %q is a domain; its queue rules: %s (queue verbs take a rule's name; all queue rules: %s)",
			name, name, strings.Join(inDomain, ", "), strings.Join(names, ", "))
	}
	return fmt.Sprintf("no queue rule named %q; the queue rules are: %s (see `sluice queues`)", name, strings.Join(names, ", "))
}

// patch reads the queue for its ETag, then changes it with If-Match (unless force), so a
// change made by someone else in between is refused, not overwritten.
func (m *Main) patch(ctx context.Context, cl *client.Client, c *common, u, name string, p client.Patch, reset, force bool) error {
	a := cl.Admin()
	if !force {
		before, err := a.Queue(ctx, name)
		if err != nil {
			return explainQueue(ctx, cl, err, u, name)
		}
		p.IfMatch = before.ETag
	}
	var q *client.Queue
	var err error
	if reset {
		q, err = a.Reset(ctx, name) // a reset takes no If-Match: it restores, whatever was set
	} else {
		q, err = a.Tune(ctx, name, p)
	}
	if errors.Is(err, client.ErrPreconditionFailed) {
		return &exitError{ExitRefused, fmt.Sprintf("queue %s was changed by someone else since you read it; run `sluice queue %s` and retry", name, name)}
	}
	if err != nil {
		return explainQueue(ctx, cl, err, u, name)
	}
	return m.printQueue(c, q)
}

func (m *Main) pause(ctx context.Context, args []string) error {
	return m.setPaused(ctx, "pause", args, true)
}
func (m *Main) resume(ctx context.Context, args []string) error {
	return m.setPaused(ctx, "resume", args, false)
}

func (m *Main) setPaused(ctx context.Context, verb string, args []string, paused bool) error {
	cl, c, u, pos, err := m.start(verb, args, 1, nil)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	// Pausing a paused queue is harmless and says what the operator wants whatever was
	// changed since: no If-Match.
	return m.patch(ctx, cl, c, u, pos[0], client.Patch{Paused: &paused}, false, true)
}

func (m *Main) purge(ctx context.Context, args []string) error {
	var o *purgeOpts
	cl, c, u, pos, err := m.start("purge", args, 1, func(fs *flag.FlagSet) { o = bindPurge(fs) })
	if err != nil {
		return err
	}
	name := pos[0]
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	what := "every message waiting in queue " + name
	if o.key != "" {
		what = fmt.Sprintf("every message waiting in key %q of queue %s", o.key, name)
	}
	if !o.yes {
		if !m.terminal() {
			return usageErr("purge deletes %s and cannot be undone; not on a terminal to ask, so add --yes", what)
		}
		q, err := cl.Admin().Queue(ctx, name)
		if err != nil {
			return explainQueue(ctx, cl, err, u, name)
		}
		if o.key == "" {
			what += fmt.Sprintf(" (%d messages in %d key(s))", q.Depth, q.ActiveKeys)
		}
		fmt.Fprintf(m.stderr(), "Delete %s? This cannot be undone. [y/N] ", what)
		line, _ := bufio.NewReader(m.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return &exitError{ExitRefused, "purge cancelled; nothing deleted"}
		}
	}
	if o.key != "" {
		err = cl.Admin().PurgeKey(ctx, name, o.key)
	} else {
		err = cl.Admin().PurgeQueue(ctx, name)
	}
	if err != nil {
		return explainQueue(ctx, cl, err, u, name)
	}
	if c.output == "json" {
		return m.printJSON(map[string]any{"purged": true, "queue": name, "key": o.key})
	}
	fmt.Fprintf(m.stdout(), "purged %s\n", strings.TrimPrefix(what, "every message waiting in "))
	return nil
}

func (m *Main) keys(ctx context.Context, args []string) error {
	var o *keysOpts
	cl, c, u, pos, err := m.start("keys", args, 1, func(fs *flag.FlagSet) { o = bindKeys(fs) })
	if err != nil {
		return err
	}
	if o.top < 1 || o.top > 100 {
		return usageErr("--top %d: want 1 to 100", o.top)
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	keys, complete, err := cl.Admin().HotKeys(ctx, pos[0], o.top)
	if err != nil {
		return explainQueue(ctx, cl, err, u, pos[0])
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	tw := m.table()
	fmt.Fprintln(tw, "KEY\tDEPTH\tNEXT DISPATCH")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", k.Key, k.Depth, formatTime(k.NextDispatchAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !complete {
		fmt.Fprintln(m.stderr(), "note: the queue has more non-empty keys than the server reads; these are the deepest of those read")
	}
	return nil
}

func (m *Main) dead(ctx context.Context, args []string) error {
	var o *deadOpts
	cl, c, u, _, err := m.start("dead", args, 0, func(fs *flag.FlagSet) { o = bindDead(fs) })
	if err != nil {
		return err
	}
	if o.limit < 0 || o.limit > 1000 {
		return usageErr("--limit %d: want 1 to 1000", o.limit)
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	q := client.DeadQuery{Queue: o.queue, Limit: o.limit}
	msgs := []client.MessageStatus{}
	var next string
	var raw []json.RawMessage // the pages' messages as the ingress sent them, for -o json
	var body []byte           // the last page
	for {
		p, err := cl.Admin().DeadPage(ctx, q)
		if err != nil {
			return explain(err, u)
		}
		msgs = append(msgs, p.Messages...)
		next = p.Next
		body = c.rec.last()
		if o.all {
			var page struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return &exitError{ExitUnreachable, "GET /v1/admin/dead: " + err.Error()}
			}
			raw = append(raw, page.Messages...)
		}
		if q.After = p.Next; !o.all || q.After == "" {
			break
		}
	}
	if c.output == "json" {
		if !o.all {
			return m.printRaw(body) // the page, with its "next" when there are more
		}
		if raw == nil {
			raw = []json.RawMessage{}
		}
		all, err := json.Marshal(map[string]any{"messages": raw})
		if err != nil {
			return err
		}
		return m.printRaw(all)
	}
	tw := m.table()
	fmt.Fprintln(tw, "ID\tQUEUE\tKEY\tATTEMPTS\tDIED\tREASON")
	for _, s := range msgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Rule, s.Key, s.Attempts, formatTime(s.UpdatedAt), dash(firstNonEmpty(s.Reason, s.LastError)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintln(m.stderr(), "note: more dead messages; add --all to list them all")
	}
	return nil
}

func (m *Main) replay(ctx context.Context, args []string) error {
	var o *replayOpts
	cl, c, u, pos, err := m.start("replay", args, -1, func(fs *flag.FlagSet) { o = bindReplay(fs) })
	if err != nil {
		return err
	}
	if len(pos) == 1 == (o.queue != "") || len(pos) > 1 {
		return usageErr("replay wants one message ID or --queue Q (one of them); run `sluice help replay`")
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	if o.queue != "" {
		r, err := cl.Admin().ReplayAll(ctx, o.queue, o.limit)
		if err != nil {
			return explain(err, u)
		}
		if c.output == "json" {
			if err := m.printRaw(c.rec.last()); err != nil {
				return err
			}
			if r.Failed > 0 {
				return &exitError{ExitRefused, fmt.Sprintf("%d dead messages could not be replayed; see the ingress's log", r.Failed)}
			}
			return nil
		}
		fmt.Fprintf(m.stdout(), "replayed %d, kept %d (their key had no room), failed %d\n", r.Replayed, r.Kept, r.Failed)
		if r.Failed > 0 {
			return &exitError{ExitRefused, fmt.Sprintf("%d dead messages could not be replayed; see the ingress's log", r.Failed)}
		}
		return nil
	}
	s, err := cl.Admin().Replay(ctx, pos[0])
	if err != nil {
		return explain(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	fmt.Fprintf(m.stdout(), "replayed %s: %s\n", s.ID, dash(s.State))
	return nil
}

func (m *Main) status(ctx context.Context, args []string) error {
	cl, c, u, pos, err := m.start("status", args, 1, nil)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	s, err := cl.Status(ctx, pos[0])
	if errors.Is(err, client.ErrNoLongerTracked) {
		return &exitError{ExitRefused, "message " + pos[0] + " " + leftSluice}
	}
	if err != nil {
		return explainMessages(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	tw := m.table()
	rows := [][2]string{{"id", s.ID}, {"state", s.State}, {"domain", s.Domain}, {"queue", s.Rule}, {"key", s.Key},
		{"attempts", fmt.Sprint(s.Attempts)}, {"created", formatTime(s.CreatedAt)}, {"updated", formatTime(s.UpdatedAt)}}
	if s.Position > 0 {
		rows = append(rows, [2]string{"position", fmt.Sprint(s.Position)})
	}
	if !s.RetryAt.IsZero() {
		rows = append(rows, [2]string{"retry at", formatTime(s.RetryAt)})
	}
	if !s.DeliverAt.IsZero() {
		rows = append(rows, [2]string{"deliver at", formatTime(s.DeliverAt)})
	}
	if s.LastError != "" {
		rows = append(rows, [2]string{"last error", s.LastError})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// What the ingress's 404 "no longer tracked" means. The command cannot know whether the
// ingress keeps delivered records (its -status-keep), so it does not say.
const (
	leftReasons = "it was delivered, cancelled or purged"
	leftSluice  = "has left sluice and the ingress keeps no record of it: " + leftReasons +
		". (If the ingress keeps delivered records, -status-keep, a delivered message answers \"delivered\" for that long.)"
)

func (m *Main) cancel(ctx context.Context, args []string) error {
	cl, c, u, pos, err := m.start("cancel", args, 1, nil)
	if err != nil {
		return err
	}
	ctx, stop := withTimeout(ctx, c)
	defer stop()
	s, err := cl.Cancel(ctx, pos[0])
	switch {
	case errors.Is(err, client.ErrNotCancellable):
		return &exitError{ExitRefused, "message " + pos[0] + " cannot be cancelled any more (being delivered, delivered or dead): " + errText(err)}
	case errors.Is(err, client.ErrNoLongerTracked):
		return &exitError{ExitRefused, "message " + pos[0] + " has left sluice: nothing to cancel (" + leftReasons + ")"}
	case err != nil:
		return explainMessages(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	if s.State == client.StateCancelled { // a repeated cancel, answered from the ingress's record
		fmt.Fprintf(m.stdout(), "%s was cancelled already (queue %s, key %s)\n", s.ID, s.Rule, s.Key)
		return nil
	}
	fmt.Fprintf(m.stdout(), "cancelled %s (it was %s in queue %s, key %s)\n", s.ID, s.State, s.Rule, s.Key)
	return nil
}

func (m *Main) submit(ctx context.Context, args []string) error {
	var o *submitOpts
	cl, c, u, pos, err := m.start("submit", args, -1, func(fs *flag.FlagSet) { o = bindSubmit(fs) })
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		return usageErr("submit wants DOMAIN KEY=VALUE… --payload …; run `sluice help submit`")
	}
	var desc []client.Entry
	for _, kv := range pos[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usageErr("descriptor entry %q: want KEY=VALUE", kv)
		}
		desc = append(desc, client.Entry{Key: k, Value: v})
	}
	payload, err := m.readPayload(o.payload)
	if err != nil {
		return err
	}
	var opts []client.SubmitOption
	if o.idemKey != "" {
		opts = append(opts, client.WithIdempotencyKey(o.idemKey))
	}
	switch {
	case o.deliverAt != "" && o.delay != 0:
		return usageErr("give --delay or --deliver-at, not both")
	case o.deliverAt != "":
		t, err := time.Parse(time.RFC3339, o.deliverAt)
		if err != nil {
			return usageErr("--deliver-at %q: want an RFC 3339 time (2026-11-25T14:00:00Z)", o.deliverAt)
		}
		opts = append(opts, client.WithDeliverAt(t))
	case o.delay > 0:
		opts = append(opts, client.WithDelay(o.delay))
	}
	if o.ttl > 0 {
		opts = append(opts, client.WithTTL(o.ttl))
	}
	if len(o.headers) > 0 {
		opts = append(opts, client.WithHeaders(o.headers))
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	s, err := cl.Submit(ctx, pos[0], desc, json.RawMessage(payload), opts...)
	if err != nil {
		e := explainMessages(err, u)
		var ee *exitError
		if key := client.IdempotencyKeyOf(err); key != "" && errors.As(e, &ee) && ee.code == ExitUnreachable {
			// The request may have been stored: the same key makes a resubmission safe.
			ee.msg += "; it may have been accepted: resubmit with --idempotency-key " + key + " to be sure of one message"
		}
		return e
	}
	if c.output == "json" {
		// The answer's body, with the idempotency key the submission was made under (the
		// request's, perhaps generated) and, for a 200, "duplicate": true.
		if s.Duplicate {
			return m.printRaw(c.rec.last(), "idempotency_key", s.IdempotencyKey, "duplicate", true)
		}
		return m.printRaw(c.rec.last(), "idempotency_key", s.IdempotencyKey)
	}
	tw := m.table()
	rows := [][2]string{{"id", s.ID}, {"state", s.State}}
	switch s.State {
	case client.StateQueued:
		if s.Capacity > 0 { // a duplicate's answer has no depth
			rows = append(rows, [2]string{"depth", fmt.Sprintf("%d of %d", s.Depth, s.Capacity)}, [2]string{"eta", formatTime(s.ETA)})
		}
	case client.StateParked:
		rows = append(rows, [2]string{"retry at", formatTime(s.RetryAt)})
	case client.StateScheduled:
		rows = append(rows, [2]string{"eta", formatTime(s.ETA)})
	}
	if s.Duplicate {
		rows = append(rows, [2]string{"duplicate", "yes: this idempotency key was accepted before; nothing new was queued"})
	}
	rows = append(rows, [2]string{"idempotency key", s.IdempotencyKey})
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// explainMessages is explain for the /v1/messages calls, whose token is the submit token.
func explainMessages(err error, url string) error {
	if errors.Is(err, client.ErrUnauthorized) {
		return &exitError{ExitUnauthorized, "the ingress at " + url + " refused the request (" + errText(err) +
			"); it runs with -submit-tokens: set SLUICE_SUBMIT_TOKEN (or --submit-token) to a token for this domain"}
	}
	return explain(err, url)
}

// readPayload reads --payload: @FILE, - for stdin, or the JSON itself.
func (m *Main) readPayload(p string) ([]byte, error) {
	var b []byte
	var err error
	switch {
	case p == "":
		return nil, usageErr("submit needs --payload @FILE, - (stdin) or JSON text")
	case p == "-":
		if m.Stdin == nil {
			return nil, usageErr("--payload -: no standard input")
		}
		b, err = io.ReadAll(m.Stdin)
	case strings.HasPrefix(p, "@"):
		b, err = os.ReadFile(p[1:])
	default:
		b = []byte(p)
	}
	if err != nil {
		return nil, usageErr("--payload: %v", err)
	}
	if !json.Valid(b) {
		return nil, usageErr("--payload is not valid JSON (a string payload needs its quotes: '\"hello\"')")
	}
	return b, nil
}

func (m *Main) rules(ctx context.Context, args []string) error {
	cl, c, u, _, err := m.start("rules", args, 0, nil)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c)
	defer cancel()
	rs, err := cl.Admin().Rules(ctx)
	if err != nil {
		return explain(err, u)
	}
	if c.output == "json" {
		return m.printRaw(c.rec.last())
	}
	tw := m.table()
	fmt.Fprintln(tw, "NAME\tDOMAIN\tDESCRIPTOR\tKIND\tLIMITS\tSOURCE")
	for _, r := range rs {
		path := make([]string, len(r.Descriptor))
		for i, e := range r.Descriptor {
			path[i] = e.Key
			if e.Value != "" {
				path[i] += "=" + e.Value
			}
		}
		var limits []string
		if r.Queue != nil {
			limits = append(limits, fmt.Sprintf("queue %d @ %s", r.Queue.Capacity, formatRate(r.Queue.Outflow)))
		}
		for _, l := range r.RateLimits {
			rate := l.Rate
			limits = append(limits, formatRate(&rate)+" "+l.Algorithm)
		}
		if r.Unlimited {
			limits = append(limits, "unlimited")
		}
		if r.ShadowMode {
			limits = append(limits, "shadow")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Domain, dash(strings.Join(path, " / ")), r.Kind, dash(strings.Join(limits, "; ")), r.Source)
	}
	return tw.Flush()
}

// check validates rules files offline, as the ingress's -check-config.
func (m *Main) check(_ context.Context, args []string) error {
	fs := m.flags("check", nil)
	o := bindCheck(fs)
	pos, err := m.parse(fs, args, nil)
	if err != nil {
		return err
	}
	var paths []string
	for _, a := range pos {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) == 0 {
		return usageErr("check wants one or more rules files or directories")
	}
	var out bytes.Buffer
	if err := rules.CheckConfigWith(&out, rules.Options{MergeDomains: o.merge}, paths...); err != nil {
		io.Copy(m.stderr(), &out) // the problems, one a line
		return &exitError{code: ExitRefused}
	}
	_, err = io.Copy(m.stdout(), &out)
	return err
}
