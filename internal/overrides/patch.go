package overrides

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sluice-io/sluice/internal/rules"
)

// ErrInvalidPatch matches (errors.Is) every error that a bad PATCH body or a patch that
// does not fit its rule produces; the admin handler answers it with 400. errors.As with
// *PatchError gives the first problem's field, with PatchErrors all of them.
var ErrInvalidPatch = errors.New("overrides: invalid patch")

// Fields is a set of override fields; Patch.Unset uses it.
type Fields uint8

const (
	FieldOutflow Fields = 1 << iota
	FieldTotalOutflow
	FieldCapacity
	FieldPaused
)

// Patch is one PATCH /v1/admin/queues/{name} body, parsed by ParsePatch:
//
//	{"outflow":{"unit":"second","requests_per_unit":5}, "capacity":500, "paused":true}
//	{"total_outflow":null}   // drop that field's override: the rules file applies again
//	{"reset":true}           // drop the whole override
//
// It is a JSON merge patch (RFC 7396) of the override: a set field replaces the
// override's, an absent one keeps it, null drops it.
type Patch struct {
	Outflow      *rules.Rate
	TotalOutflow *rules.Rate
	Capacity     *int64
	// Paused is set for `"paused": true` only. `"paused": false` is the same as null —
	// not paused is what every rules file says — so it lands in Unset and an override
	// that only paused a rule disappears when the rule is resumed.
	Paused *bool
	// Unset are the fields the body set to null (or paused: false).
	Unset Fields
	// Reset drops the whole override. ParsePatch refuses it together with other fields.
	Reset bool
	// IfRevision, when set, makes Store.Apply fail with ErrConflict unless the stored
	// override is still at this revision (HTTP If-Match); 0 means "no override is stored".
	// nil applies whatever is stored. Not read from the body.
	IfRevision *uint64
}

// IsZero reports whether p changes nothing.
func (p Patch) IsZero() bool {
	return p.Outflow == nil && p.TotalOutflow == nil && p.Capacity == nil && p.Paused == nil &&
		p.Unset == 0 && !p.Reset
}

// Merge returns o with p applied: fields p sets replace o's, fields p unsets are
// dropped, the rest keep o's value. A Reset patch gives the zero Override.
// UpdatedAt and Revision are o's; Store.Apply sets them.
func (o Override) Merge(p Patch) Override {
	if p.Reset {
		return Override{}
	}
	if p.Unset&FieldOutflow != 0 {
		o.Outflow = nil
	}
	if p.Unset&FieldTotalOutflow != 0 {
		o.TotalOutflow = nil
	}
	if p.Unset&FieldCapacity != 0 {
		o.Capacity = nil
	}
	if p.Unset&FieldPaused != 0 {
		o.Paused = nil
	}
	if p.Outflow != nil {
		o.Outflow = ptr(*p.Outflow)
	}
	if p.TotalOutflow != nil {
		o.TotalOutflow = ptr(*p.TotalOutflow)
	}
	if p.Capacity != nil {
		o.Capacity = ptr(*p.Capacity)
	}
	if p.Paused != nil {
		o.Paused = ptr(*p.Paused)
	}
	return o
}

func ptr[T any](v T) *T { return &v }

// PatchError is one problem with a patch: the JSON field (e.g.
// "outflow.requests_per_unit", "" for the body as a whole) and what is wrong with it.
// Message does not repeat Field ("must be ≥ 1 (got 0)"): Error joins the two.
type PatchError struct {
	Field   string
	Message string
}

func (e *PatchError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Is makes every PatchError match ErrInvalidPatch.
func (e *PatchError) Is(target error) bool { return target == ErrInvalidPatch }

// PatchErrors is every problem found in one patch, sorted by field.
type PatchErrors []*PatchError

func (es PatchErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

// Detail is es for a problem whose field member is es[0].Field: the first problem's
// message, then the others as "field: message", e.g. `must be ≥ 1 (got 0);
// outflow.unit: must be one of …` — each field named once, without the package prefix.
func (es PatchErrors) Detail() string {
	s := make([]string, len(es))
	for i, e := range es {
		if i == 0 {
			s[i] = e.Message
		} else {
			s[i] = e.Error()
		}
	}
	return strings.Join(s, "; ")
}

// Unwrap lets errors.As and errors.Is see each *PatchError.
func (es PatchErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// patchErrors collects problems; err returns nil or the PatchErrors.
type patchErrors struct{ list PatchErrors }

func (p *patchErrors) add(field, format string, args ...any) {
	p.list = append(p.list, &PatchError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (p *patchErrors) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return p.list
}

// unitOrder is the rules file's rate units from short to long, for messages.
var unitOrder = rules.UnitNames()

var (
	patchFields = []string{"outflow", "total_outflow", "capacity", "paused", "reset"}
	rateFields  = []string{"unit", "interval", "requests_per_unit"}
)

// minEvery is the shortest spacing a rate may ask for: the scheduler keeps slots in
// microseconds, so a faster outflow would round to "unpaced".
const minEvery = time.Microsecond

// ParsePatch parses and validates a PATCH body. Every problem is reported, each naming
// its field, e.g. `outflow.requests_per_unit: must be ≥ 1 (got 0)`; the error matches
// ErrInvalidPatch. Rates take the rules file's shape: {unit: second|minute|hour|day|week
// (also month, year), requests_per_unit: N} or {interval: <Go duration>, requests_per_unit: N}.
//
// ParsePatch checks the body on its own; whether it fits the rule (e.g. total_outflow ≥
// outflow when only one of them is patched) is checked by Store.Apply.
func ParsePatch(body []byte) (Patch, error) {
	var p Patch
	var errs patchErrors
	fields, ok := object(body, "", patchFields, &errs)
	if !ok {
		return Patch{}, fmt.Errorf("overrides: %w", errs.err())
	}
	if len(fields) == 0 {
		errs.add("", "needs at least one of %s", strings.Join(patchFields, ", "))
	}
	for _, name := range sortedKeys(fields) {
		raw := fields[name]
		null := isNull(raw)
		switch name {
		case "outflow", "total_outflow":
			f := FieldOutflow
			if name == "total_outflow" {
				f = FieldTotalOutflow
			}
			if null {
				p.Unset |= f
				continue
			}
			if r, ok := parseRate(raw, name, &errs); ok {
				if f == FieldOutflow {
					p.Outflow = &r
				} else {
					p.TotalOutflow = &r
				}
			}
		case "capacity":
			if null {
				p.Unset |= FieldCapacity
				continue
			}
			if n, ok := integer(raw, name, &errs); ok {
				if n < 1 {
					errs.add(name, "must be ≥ 1 (got %d)", n)
				} else {
					p.Capacity = &n
				}
			}
		case "paused":
			if null {
				p.Unset |= FieldPaused
				continue
			}
			var b bool
			if json.Unmarshal(raw, &b) != nil {
				errs.add(name, "must be true or false (got %s)", describe(raw))
			} else if b {
				p.Paused = &b
			} else {
				p.Unset |= FieldPaused
			}
		case "reset":
			// Only true: {"reset": false} would change nothing (and be recorded as a resume).
			var b bool
			switch {
			case null || json.Unmarshal(raw, &b) != nil:
				errs.add(name, "must be true; omit it otherwise (got %s)", describe(raw))
			case !b:
				errs.add(name, "must be true; omit it otherwise")
			}
			p.Reset = b
		}
	}
	if p.Reset && len(fields) > 1 {
		errs.add("reset", "cannot be combined with other fields: reset first, then patch")
	}
	if p.Outflow != nil && p.TotalOutflow != nil && p.TotalOutflow.PerSecond() < p.Outflow.PerSecond() {
		errs.add("total_outflow", "must be ≥ outflow (%.6g/s < %.6g/s): the whole rule cannot drain slower than one key",
			p.TotalOutflow.PerSecond(), p.Outflow.PerSecond())
	}
	if err := errs.err(); err != nil {
		return Patch{}, fmt.Errorf("overrides: %w", err)
	}
	return p, nil
}

// object decodes raw as a JSON object whose keys must be among allowed.
func object(raw []byte, field string, allowed []string, errs *patchErrors) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil || m == nil {
		msg := "must be a JSON object {" + strings.Join(allowed, ", ") + "}"
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			msg += fmt.Sprintf(" (invalid JSON at byte %d: %v)", se.Offset, se)
		case err != nil && !errors.As(err, &te) && len(bytes.TrimSpace(raw)) > 0:
			msg += fmt.Sprintf(" (invalid JSON: %v)", err)
		default:
			msg += " (got " + describe(raw) + ")"
		}
		errs.add(field, "%s", msg)
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		errs.add(field, "unexpected data after the JSON object")
		return nil, false
	}
	ok := true
	for _, k := range sortedKeys(m) {
		if !contains(allowed, k) {
			errs.add(join(field, k), "unknown field (allowed: %s)", strings.Join(allowed, ", "))
			ok = false
		}
	}
	return m, ok
}

// parseRate parses {unit | interval, requests_per_unit}.
func parseRate(raw json.RawMessage, field string, errs *patchErrors) (rules.Rate, bool) {
	m, ok := object(raw, field, rateFields, errs)
	if !ok {
		return rules.Rate{}, false
	}
	var rj RateJSON
	if v, has := m["unit"]; has {
		if json.Unmarshal(v, &rj.Unit) != nil || rj.Unit == "" {
			errs.add(join(field, "unit"), "must be one of %s (got %s)", strings.Join(unitOrder, ", "), describe(v))
			ok = false
		}
	}
	if v, has := m["interval"]; has {
		if json.Unmarshal(v, &rj.Interval) != nil || rj.Interval == "" {
			errs.add(join(field, "interval"), "must be a duration like 30s, 5m or 24h (got %s)", describe(v))
			ok = false
		}
	}
	if v, has := m["requests_per_unit"]; has {
		n, iok := integer(v, join(field, "requests_per_unit"), errs)
		ok = ok && iok
		rj.RequestsPerUnit = n
	} else {
		errs.add(join(field, "requests_per_unit"), "required")
		ok = false
	}
	if !ok {
		// Still report unit/interval problems the decoder did not see.
		if _, has := m["unit"]; !has {
			if _, has := m["interval"]; !has {
				errs.add(join(field, "unit"), "required (or interval)")
			}
		}
		return rules.Rate{}, false
	}
	return decodeRate(rj, field, errs)
}

// decodeRate turns a RateJSON into a rules.Rate, reporting problems under field.
func decodeRate(rj RateJSON, field string, errs *patchErrors) (rules.Rate, bool) {
	var r rules.Rate
	ok := true
	switch {
	case rj.Unit != "" && rj.Interval != "":
		errs.add(join(field, "interval"), "set either unit or interval, not both")
		ok = false
	case rj.Unit != "":
		d, known := rules.UnitDuration(rj.Unit)
		if !known {
			errs.add(join(field, "unit"), "must be one of %s (got %q); or use interval: <duration>",
				strings.Join(unitOrder, ", "), rj.Unit)
			ok = false
		}
		r.Interval = d
	case rj.Interval != "":
		d, err := time.ParseDuration(rj.Interval)
		switch {
		case err != nil:
			errs.add(join(field, "interval"), "must be a duration like 30s, 5m or 24h (got %q)", rj.Interval)
			ok = false
		case d <= 0:
			errs.add(join(field, "interval"), "must be > 0 (got %s)", rj.Interval)
			ok = false
		}
		r.Interval = d
	default:
		errs.add(join(field, "unit"), "required (or interval)")
		ok = false
	}
	if rj.RequestsPerUnit < 1 {
		errs.add(join(field, "requests_per_unit"), "must be ≥ 1 (got %d)", rj.RequestsPerUnit)
		ok = false
	}
	r.Requests = rj.RequestsPerUnit
	if ok && r.Every() < minEvery {
		errs.add(field, "must be at most %d per second (one per microsecond): got %d per %s",
			int64(time.Second/minEvery), r.Requests, r.Interval)
		ok = false
	}
	return r, ok
}

// integer decodes raw as a JSON integer (not 1.5, not "10").
func integer(raw json.RawMessage, field string, errs *patchErrors) (int64, bool) {
	// json.Number also accepts a quoted number, but "10" is a string, not an integer.
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] != '"' {
		var num json.Number
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		if dec.Decode(&num) == nil {
			if n, err := num.Int64(); err == nil {
				return n, true
			}
		}
	}
	errs.add(field, "must be an integer (got %s)", describe(raw))
	return 0, false
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// describe shows a JSON value in a message, shortened.
func describe(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "nothing"
	}
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "…"
	}
	return s
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
