package overrides

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
	"github.com/sluice-io/sluice/internal/window"
)

// KeyOverride is what an operator changed on one key of one rule (PATCH
// /v1/admin/queues/{name}/keys/{key}): its outflow, that it is paused, or its delivery
// window, optionally until a time after which the rule's values return by themselves. It
// is a plain value of 88 bytes, so a lookup copies it without allocating; the window is
// behind a pointer (never changed once stored) so that the many overrides without one
// stay small.
type KeyOverride struct {
	// Outflow replaces the rule's per-key outflow for this key; the zero Rate means
	// "not overridden": the rule's (or the rule override's) outflow applies.
	Outflow rules.Rate
	// Paused holds the key's messages where they are: the drainer delivers none of them.
	Paused bool
	// Window replaces the rule's delivery.window for this key; nil: the rule's applies.
	// A stored window is never modified (readers share it).
	Window *window.Window
	// Until is when the override ends by itself; zero means it lasts until reset. An
	// override whose Until has passed reads as absent (Active) before the sweeper deletes it.
	Until time.Time
	// UpdatedAt is when the override was written (the store's clock).
	UpdatedAt time.Time
	// Revision is the KV revision it was read at; not part of the stored value.
	Revision uint64
}

// IsZero reports whether o overrides nothing.
func (o KeyOverride) IsZero() bool { return o.Outflow.Zero() && !o.Paused && o.Window == nil }

// Active reports whether o is in force at now: it overrides something and has not ended.
func (o KeyOverride) Active(now time.Time) bool {
	return !o.IsZero() && (o.Until.IsZero() || now.Before(o.Until))
}

// Equal reports whether a and b override the same values with the same end.
func (o KeyOverride) Equal(b KeyOverride) bool {
	return o.Outflow == b.Outflow && o.Paused == b.Paused && o.Until.Equal(b.Until) &&
		(o.Window == nil) == (b.Window == nil) && (o.Window == nil || o.Window.Equal(*b.Window))
}

// String shows o, e.g. "outflow=20/1s until 2026-11-29T00:00:00Z", or "none".
func (o KeyOverride) String() string {
	var parts []string
	if !o.Outflow.Zero() {
		parts = append(parts, fmt.Sprintf("outflow=%d/%s", o.Outflow.Requests, o.Outflow.Interval))
	}
	if o.Paused {
		parts = append(parts, "paused")
	}
	if o.Window != nil {
		parts = append(parts, "window="+o.Window.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	if !o.Until.IsZero() {
		parts = append(parts, "until "+o.Until.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, " ")
}

// storedKeyOverride is the value in the key-override bucket. The key itself is not in
// it: the KV key carries it (KeyKVKey), so each override is stored once. Short names
// keep 100,000 overrides small (docs/operations.md "Steering one key" has the figures).
type storedKeyOverride struct {
	Outflow   string       `json:"o,omitempty"` // "20/1s": requests/interval
	Paused    bool         `json:"p,omitempty"`
	Window    *window.Spec `json:"w,omitempty"`
	Until     int64        `json:"u,omitempty"` // Unix seconds; 0: no end
	UpdatedAt int64        `json:"t"`           // Unix milliseconds
}

func encodeKeyOverride(o KeyOverride) ([]byte, error) {
	s := storedKeyOverride{Paused: o.Paused, UpdatedAt: o.UpdatedAt.UnixMilli()}
	if !o.Outflow.Zero() {
		s.Outflow = strconv.FormatInt(o.Outflow.Requests, 10) + "/" + o.Outflow.Interval.String()
	}
	if !o.Until.IsZero() {
		s.Until = o.Until.Unix()
	}
	if o.Window != nil {
		s.Window = window.SpecOf(*o.Window)
	}
	return json.Marshal(s)
}

func decodeKeyOverride(data []byte) (KeyOverride, error) {
	var s storedKeyOverride
	if err := json.Unmarshal(data, &s); err != nil {
		return KeyOverride{}, fmt.Errorf("overrides: stored key override: %w", err)
	}
	o := KeyOverride{Paused: s.Paused, UpdatedAt: time.UnixMilli(s.UpdatedAt).UTC()}
	if s.Until != 0 {
		o.Until = time.Unix(s.Until, 0).UTC()
	}
	if s.Outflow != "" {
		r, err := ParseRateText(s.Outflow)
		if err != nil {
			return KeyOverride{}, fmt.Errorf("overrides: stored key override: %w", err)
		}
		o.Outflow = r
	}
	if s.Window != nil {
		w, errs := s.Window.Window()
		if len(errs) > 0 {
			return KeyOverride{}, fmt.Errorf("overrides: stored key override: window.%s: %s", errs[0].Field, errs[0].Message)
		}
		o.Window = &w
	}
	return o, nil
}

// keyTokenPrefix and the encoding are queue.KeyToken's ("k" + base64url without
// padding; a test holds them equal). They are repeated here rather than imported so
// that this package stays below queue: the overrides are read by processes that never
// open a queue.
const keyTokenPrefix = "k"

// KeyKVKey is the KV key of key's override in rule: "<rule>.<key token>". The key is
// encoded (never raw: keys are data and may contain '.', '*', '>' or spaces), so no key
// can address another's override, and every override of a rule shares the prefix
// "<rule>." for a filtered listing.
func KeyKVKey(rule, key string) string {
	return rule + "." + keyTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// splitKVKey is KeyKVKey backwards.
func splitKVKey(k string) (rule, key string, ok bool) {
	rule, tok, ok := strings.Cut(k, ".")
	if !ok || !strings.HasPrefix(tok, keyTokenPrefix) {
		return "", "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(tok[len(keyTokenPrefix):])
	if err != nil {
		return "", "", false
	}
	return rule, string(b), true
}

// rateUnits are the units ParseRateText reads after the slash, by what a person types.
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour,
}

// ParseRateText reads a rate as `sluice tune` takes it: "20/s", "300/minute", "10/30s"
// (10 per 30 seconds). The bulk form's CSV and NDJSON use it, and so does the stored value.
func ParseRateText(s string) (rules.Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return rules.Rate{}, fmt.Errorf("rate %q: want N/UNIT (20/s, 300/m, 10/h) or N/DURATION (10/30s)", s)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || count < 1 {
		return rules.Rate{}, fmt.Errorf("rate %q: %q is not a count ≥ 1", s, n)
	}
	per = strings.TrimSpace(per)
	p := strings.ToLower(per)
	if len(p) > 3 { // a plural: "seconds", "mins"; never "ms"
		p = strings.TrimSuffix(p, "s")
	}
	d, unit := rateUnits[p]
	if !unit {
		d, err = time.ParseDuration(per)
		if err != nil || d <= 0 {
			return rules.Rate{}, fmt.Errorf("rate %q: %q is not a unit (s, m, h, d, w) nor a duration (30s)", s, per)
		}
	}
	r := rules.Rate{Requests: count, Interval: d}
	if r.Every() < minEvery {
		return rules.Rate{}, fmt.Errorf("rate %q: at most %d per second", s, int64(time.Second/minEvery))
	}
	return r, nil
}

// KeyPatch is one PATCH /v1/admin/queues/{name}/keys/{key} body, or one line of the bulk
// form, parsed by ParseKeyPatch:
//
//	{"outflow":{"unit":"second","requests_per_unit":20}, "for":"24h"}
//	{"outflow":"20/s", "until":"2026-12-01T00:00:00Z"}
//	{"paused":true}
//	{"window":{"days":["mon-fri"],"from":"09:00","to":"18:00","time_zone":"Europe/Paris"}}
//	{"window":"mon-fri 09:00-18:00 Europe/Paris"}   // the same, as `sluice tune --window` takes it
//	{"window":null}    // the rule's delivery.window applies to this key again
//	{"outflow":null}   // the rule's outflow applies to this key again
//	{"reset":true}     // drop the key's override
//
// Like the rule-level Patch it is a JSON merge patch; `until` and `for` set when the
// override ends (`until: null` makes it last), and an absent end keeps the current one.
type KeyPatch struct {
	Outflow *rules.Rate
	Paused  *bool // set for paused: true only; false and null land in Unset
	Window  *window.Window
	Until   *time.Time
	For     time.Duration // resolved to Until against the store's clock
	Unset   Fields        // FieldOutflow, FieldPaused, FieldWindow; FieldUntil for until: null
	Reset   bool
}

// FieldUntil marks `until: null` in KeyPatch.Unset.
const FieldUntil Fields = 1 << 7

// FieldWindow marks `window: null` in KeyPatch.Unset.
const FieldWindow Fields = 1 << 6

var keyPatchFields = []string{"outflow", "paused", "window", "until", "for", "reset"}

// ParseWindowText reads a window in its one-line form (window.ParseSpecText) and checks
// it; problems name their field (window, window.from …) and match ErrInvalidPatch.
func ParseWindowText(text string) (window.Window, error) {
	var errs patchErrors
	raw, _ := json.Marshal(text)
	w, ok := parseWindow(raw, "window", &errs)
	if !ok {
		return window.Window{}, fmt.Errorf("overrides: %w", errs.err())
	}
	return w, nil
}

var windowSpecFields = []string{"days", "from", "to", "time_zone", "default_time_zone"}

// parseWindow reads a key's window: an object as the rules file's delivery.window, or
// its one-line text ("mon-fri 09:00-18:00 Europe/Paris"). Problems name their field
// (window.from, window.days[1]).
func parseWindow(raw json.RawMessage, field string, errs *patchErrors) (window.Window, bool) {
	var spec window.Spec
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' {
		var text string
		if err := json.Unmarshal(t, &text); err != nil {
			errs.add(field, "must be a window object {%s} or its text (got %s)", strings.Join(windowSpecFields, ", "), describe(raw))
			return window.Window{}, false
		}
		sp, err := window.ParseSpecText(text)
		if err != nil {
			errs.add(field, "%v", err)
			return window.Window{}, false
		}
		spec = sp
	} else {
		m, ok := object(raw, field, windowSpecFields, errs)
		if !ok {
			return window.Window{}, false
		}
		good := true
		str := func(name string, dst *string) {
			v, has := m[name]
			if !has {
				return
			}
			if json.Unmarshal(v, dst) != nil {
				errs.add(join(field, name), "must be a string (got %s)", describe(v))
				good = false
			}
		}
		str("from", &spec.From)
		str("to", &spec.To)
		str("time_zone", &spec.TimeZone)
		str("default_time_zone", &spec.DefaultTimeZone)
		if v, has := m["days"]; has {
			if json.Unmarshal(v, &spec.Days) != nil || len(spec.Days) == 0 {
				errs.add(join(field, "days"), "must be a list of days such as [\"mon-fri\"] or [\"sat\", \"sun\"] (got %s)", describe(v))
				good = false
			}
		}
		if !good {
			return window.Window{}, false
		}
	}
	w, ferrs := spec.Window()
	for _, fe := range ferrs {
		errs.add(field+"."+fe.Field, "%s", fe.Message)
	}
	return w, len(ferrs) == 0
}

// ParseKeyPatch parses and validates a key PATCH body (or an NDJSON line of the bulk
// form with its "key" member removed). Every problem is reported, each naming its field;
// the error matches ErrInvalidPatch. `capacity` is refused with the reason: a queue's
// capacity per key is its stream's MaxMsgsPerSubject, one number for every key of the rule.
func ParseKeyPatch(body []byte) (KeyPatch, error) {
	var p KeyPatch
	var errs patchErrors
	fields, ok := object(body, "", append(keyPatchFields, "capacity"), &errs)
	if !ok {
		return KeyPatch{}, fmt.Errorf("overrides: %w", errs.err())
	}
	if len(fields) == 0 {
		errs.add("", "needs at least one of %s", strings.Join(keyPatchFields, ", "))
	}
	for _, name := range sortedKeys(fields) {
		raw := fields[name]
		null := isNull(raw)
		switch name {
		case "capacity":
			errs.add(name, "cannot be overridden per key: a queue's capacity per key is its stream's "+
				"max_msgs_per_subject, one value for every key of the rule; tune the rule's capacity "+
				"(PATCH /v1/admin/queues/{name}) instead")
		case "outflow":
			if null {
				p.Unset |= FieldOutflow
				continue
			}
			var s string
			if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' && json.Unmarshal(t, &s) == nil {
				r, err := ParseRateText(s)
				if err != nil {
					errs.add(name, "%v", err)
					continue
				}
				p.Outflow = &r
				continue
			}
			if r, ok := parseRate(raw, name, &errs); ok {
				p.Outflow = &r
			}
		case "paused":
			var b bool
			switch {
			case null:
				p.Unset |= FieldPaused
			case json.Unmarshal(raw, &b) != nil:
				errs.add(name, "must be true or false (got %s)", describe(raw))
			case b:
				p.Paused = &b
			default:
				p.Unset |= FieldPaused
			}
		case "window":
			if null {
				p.Unset |= FieldWindow
				continue
			}
			if w, ok := parseWindow(raw, name, &errs); ok {
				p.Window = &w
			}
		case "until":
			if null {
				p.Unset |= FieldUntil
				continue
			}
			var s string
			t, err := time.Time{}, error(nil)
			if err = json.Unmarshal(raw, &s); err == nil {
				t, err = time.Parse(time.RFC3339, s)
			}
			if err != nil {
				errs.add(name, "must be an RFC 3339 time like 2026-12-01T00:00:00Z (got %s)", describe(raw))
				continue
			}
			p.Until = &t
		case "for":
			var s string
			d, err := time.Duration(0), error(nil)
			if err = json.Unmarshal(raw, &s); err == nil {
				d, err = time.ParseDuration(s)
			}
			switch {
			case err != nil:
				errs.add(name, "must be a duration like 30m, 24h or 168h (got %s)", describe(raw))
			case d <= 0:
				errs.add(name, "must be > 0 (got %s)", s)
			default:
				p.For = d
			}
		case "reset":
			var b bool
			if null || json.Unmarshal(raw, &b) != nil || !b {
				errs.add(name, "must be true; omit it otherwise (got %s)", describe(raw))
			}
			p.Reset = b
		}
	}
	if _, u := fields["until"]; u {
		if _, f := fields["for"]; f {
			errs.add("for", "give either until or for, not both")
		}
	}
	if p.Reset && len(fields) > 1 {
		errs.add("reset", "cannot be combined with other fields: reset first, then patch")
	}
	if err := errs.err(); err != nil {
		return KeyPatch{}, fmt.Errorf("overrides: %w", err)
	}
	return p, nil
}

// MergeKey returns o with p applied at now (`for` counts from now). An o that has ended
// counts as none: a patch after expiry starts afresh instead of reviving old fields.
func (o KeyOverride) MergeKey(p KeyPatch, now time.Time) KeyOverride {
	if p.Reset || !o.Active(now) {
		o = KeyOverride{}
	}
	if p.Reset {
		return o
	}
	if p.Unset&FieldOutflow != 0 {
		o.Outflow = rules.Rate{}
	}
	if p.Unset&FieldPaused != 0 {
		o.Paused = false
	}
	if p.Unset&FieldUntil != 0 {
		o.Until = time.Time{}
	}
	if p.Unset&FieldWindow != 0 {
		o.Window = nil
	}
	if p.Window != nil {
		w := *p.Window // a copy of its own: stored windows are shared by readers
		o.Window = &w
	}
	if p.Outflow != nil {
		o.Outflow = *p.Outflow
	}
	if p.Paused != nil {
		o.Paused = *p.Paused
	}
	if p.Until != nil {
		o.Until = p.Until.UTC().Truncate(time.Second)
	}
	if p.For > 0 {
		// Rounded up to the second the store keeps, so `for: 1s` never ends early.
		o.Until = now.Add(p.For + time.Second - 1).UTC().Truncate(time.Second)
	}
	return o
}

// checkKeyOverride checks o against rule r (with its rule-level override ro) at now,
// naming the field: the rule must have a queue, the end must be in the future, and the
// key's outflow must not exceed the rule's total_outflow (which caps the sum of all keys).
func checkKeyOverride(r *rules.Rule, ro Override, o KeyOverride, now time.Time) error {
	var errs patchErrors
	if r.Queue == nil {
		errs.add("", "rule %q is check-only (no queue): no key to tune", r.Name)
		return fmt.Errorf("%w: %w", ErrNoQueue, errs.err())
	}
	if !o.Until.IsZero() && !now.Before(o.Until) {
		errs.add("until", "must be in the future (got %s, now is %s)", o.Until.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	total := r.Queue.TotalOutflow
	if ro.TotalOutflow != nil {
		total = *ro.TotalOutflow
	}
	if !o.Outflow.Zero() && !total.Zero() && o.Outflow.PerSecond() > total.PerSecond() {
		errs.add("outflow", "must be ≤ the rule's total_outflow (%.6g/s > %.6g/s), which caps the sum of every key",
			o.Outflow.PerSecond(), total.PerSecond())
	}
	if err := errs.err(); err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	return nil
}

// KeyOverrideJSON is a key override as the admin API shows it.
type KeyOverrideJSON struct {
	Outflow   *RateJSON    `json:"outflow,omitempty"`
	Paused    bool         `json:"paused,omitempty"`
	Window    *window.Spec `json:"window,omitempty"`
	Until     string       `json:"until,omitempty"`
	UpdatedAt string       `json:"updated_at"`
}

// View returns o as the admin API shows it.
func (o KeyOverride) View() KeyOverrideJSON {
	v := KeyOverrideJSON{Paused: o.Paused, UpdatedAt: o.UpdatedAt.UTC().Format(time.RFC3339)}
	if !o.Outflow.Zero() {
		r := EncodeRate(o.Outflow)
		v.Outflow = &r
	}
	if !o.Until.IsZero() {
		v.Until = o.Until.UTC().Format(time.RFC3339)
	}
	if o.Window != nil {
		v.Window = window.SpecOf(*o.Window)
	}
	return v
}
