package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-io/sluice/internal/httpx"
)

// Limits on what a request may carry.
const (
	MaxKeyBytes            = 256 // a descriptor value (the key), docs/http-api.md "Conventions"
	MaxDomainBytes         = 256
	MaxDescriptorEntries   = 16
	MaxIdempotencyKeyBytes = 256
	MaxCheckDescriptors    = 64
	// MaxHitsAddend is the largest hits_addend of a check: envoy's request-level field is a
	// uint32, and no limit counts more than that in one request.
	MaxHitsAddend = 1<<32 - 1
)

type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Check is the body of POST /v1/check (envoy's /json shape). Every field may also
// be spelled as protojson spells it (hitsAddend, requestsPerUnit, unitMultiplier,
// isNegativeHits), as envoy's /json reads it; those take a number or a string of digits
// (protojson writes 64-bit integers as strings). Setting both spellings is refused.
type Check struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries         []Entry   `json:"entries"`
		HitsAddend      *uint64   `json:"hits_addend"` // overrides the request's, as envoy's
		HitsAddendCamel *jsonUint `json:"hitsAddend"`
		Limit           *struct { // envoy's RateLimitOverride
			RequestsPerUnit      uint64    `json:"requests_per_unit"`
			RequestsPerUnitCamel *jsonUint `json:"requestsPerUnit"`
			Unit                 string    `json:"unit"`
			UnitMultiplier       uint64    `json:"unit_multiplier"`
			UnitMultiplierCamel  *jsonUint `json:"unitMultiplier"`
		} `json:"limit"`
		IsNegativeHits      bool `json:"is_negative_hits"`
		IsNegativeHitsCamel bool `json:"isNegativeHits"`
	} `json:"descriptors"`
	HitsAddend      *int64    `json:"hits_addend"`
	HitsAddendCamel *jsonUint `json:"hitsAddend"`
}

// normalize folds the protojson spellings into the snake_case fields; a field set in both
// spellings is a problem naming both.
func (req *Check) Normalize() *httpx.Problem {
	both := func(field, camel string) *httpx.Problem {
		p := httpx.BadRequest(field, "is set twice: use either "+field[strings.LastIndexByte(field, '.')+1:]+" or "+camel)
		return &p
	}
	if p := req.HitsAddendCamel.check("hitsAddend"); p != nil {
		return p
	}
	if c := req.HitsAddendCamel; c != nil {
		if req.HitsAddend != nil {
			return both("hits_addend", "hitsAddend")
		}
		if c.v > MaxHitsAddend {
			p := httpx.BadRequest("hitsAddend", "must be 0 to "+strconv.FormatInt(MaxHitsAddend, 10))
			return &p
		}
		h := int64(c.v)
		req.HitsAddend = &h
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		at := "descriptors[" + strconv.Itoa(i) + "]"
		if p := d.HitsAddendCamel.check(at + ".hitsAddend"); p != nil {
			return p
		}
		if l := d.Limit; l != nil {
			if p := l.RequestsPerUnitCamel.check(at + ".limit.requestsPerUnit"); p != nil {
				return p
			}
			if p := l.UnitMultiplierCamel.check(at + ".limit.unitMultiplier"); p != nil {
				return p
			}
		}
		if c := d.HitsAddendCamel; c != nil {
			if d.HitsAddend != nil {
				return both(at+".hits_addend", "hitsAddend")
			}
			if c.v > MaxHitsAddend {
				p := httpx.BadRequest(at+".hitsAddend", "must be 0 to "+strconv.FormatInt(MaxHitsAddend, 10))
				return &p
			}
			h := c.v
			d.HitsAddend = &h
		}
		if d.IsNegativeHitsCamel {
			d.IsNegativeHits = true
		}
		if l := d.Limit; l != nil {
			if c := l.RequestsPerUnitCamel; c != nil {
				if l.RequestsPerUnit != 0 {
					return both(at+".limit.requests_per_unit", "requestsPerUnit")
				}
				l.RequestsPerUnit = c.v
			}
			if c := l.UnitMultiplierCamel; c != nil {
				if l.UnitMultiplier != 0 {
					return both(at+".limit.unit_multiplier", "unitMultiplier")
				}
				l.UnitMultiplier = c.v
			}
		}
	}
	return nil
}

// jsonUint is an unsigned integer as protojson reads one: a JSON number or a string of
// decimal digits.
type jsonUint struct {
	v   uint64
	bad string // not a whole number: the JSON as given (normalize names the field)
}

// UnmarshalJSON takes a number or a string of digits. Anything else is kept, not refused
// here, so the problem can name the field: encoding/json's path in an error from an
// UnmarshalJSON method differs between Go versions.
func (u *jsonUint) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		u.bad = string(b)
		return nil
	}
	u.v = v
	return nil
}

// check is the problem of a value that was not a whole number, naming field.
func (u *jsonUint) check(field string) *httpx.Problem {
	if u == nil || u.bad == "" {
		return nil
	}
	p := httpx.BadRequest(field, "must be a whole number ≥ 0 (a JSON number or a string of digits), not "+u.bad)
	return &p
}

// The 415's detail of a check.
const CheckTypes = "Content-Type must be application/json"

// CheckJSONType refuses a request whose Content-Type is set and not JSON, with detail.
func CheckJSONType(r *http.Request, detail string) *httpx.Problem {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		p := httpx.UnsupportedMediaType(detail)
		return &p
	}
	return nil
}

// DecodeJSON decodes exactly one JSON value into v, refusing unknown fields and any
// string decoded into a Go string (a domain, a key, a header) that is not valid UTF-8:
// encoding/json would replace its bytes with U+FFFD, and two different keys would become
// one. A problem names the field with its whole path (descriptor[0].value), which
// encoding/json's errors do not give (FindFault).
func DecodeJSON(body []byte, v any) *httpx.Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		p := JSONProblem(err)
		var syn *json.SyntaxError
		if !errors.As(err, &syn) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			if f := FindFault(body, reflect.TypeOf(v).Elem()); f != nil {
				p = httpx.BadRequest(f.Field, f.Detail)
			}
		}
		return &p
	}
	if _, err := dec.Token(); err != io.EOF {
		p := httpx.BadRequest("", "the body must hold exactly one JSON object")
		return &p
	}
	if MayHoldBadStrings(body) {
		if f := FindFault(body, reflect.TypeOf(v).Elem()); f != nil {
			p := httpx.BadRequest(f.Field, f.Detail)
			return &p
		}
	}
	return nil
}

// ContainsFold reports whether b holds s, lower-case ASCII, in any case of ASCII letters.
// (Unicode folding adds only the Kelvin sign to k and the long s to s: markEmptyKey looks
// for "idempotency_", which has neither.)
func ContainsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		j := 0
		for ; j < len(s); j++ {
			c := b[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != s[j] {
				break
			}
		}
		if j == len(s) {
			return true
		}
	}
	return false
}

// MayHoldBadStrings reports whether body has bytes that are not UTF-8, or a \u escape of a
// UTF-16 surrogate (which, unpaired, encoding/json also decodes as U+FFFD): only then can a
// decoded string have been replaced, and FindFault looks.
func MayHoldBadStrings(body []byte) bool {
	if !utf8.Valid(body) {
		return true
	}
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		i += j + 2
		if i+1 < len(body) && (body[i] == 'd' || body[i] == 'D') && strings.IndexByte("89abcdefABCDEF", body[i+1]) >= 0 {
			return true
		}
	}
}

// validJSONString reports whether raw, one JSON string as written (quotes and escapes), is
// valid UTF-8 and has no unpaired surrogate escape: what it decodes to is exactly what was
// sent, not U+FFFD in place of something else.
func validJSONString(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	hex4 := func(i int) rune {
		if i+4 > len(raw) {
			return -1
		}
		v, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(i + 1)
		i += 4
		switch {
		case r >= 0xD800 && r < 0xDC00: // a high surrogate: a low one must follow
			if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(i + 3); lo >= 0xDC00 && lo < 0xE000 {
					i += 6
					continue
				}
			}
			return false
		case r >= 0xDC00 && r < 0xE000:
			return false
		}
	}
	return true
}

// fault is what FindFault found: the field (its whole path) and what is wrong with it.
type Fault struct{ Field, Detail string }

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// FindFault reads body, one JSON value, as encoding/json decodes it into a value of type t
// (unknown fields refused), and returns the first fault in the body's order: an unknown
// member, a value of the wrong JSON type or out of range, or a string decoded into a Go
// string (or a map's name) that is not valid UTF-8 or has an unpaired surrogate escape.
// The field is named with its whole path, as docs/http-api.md names fields: members joined
// by ".", array elements by their index (descriptor[0].value,
// descriptors[0].entries[1].key, headers.X-A). Values decoded by their own UnmarshalJSON
// (and json.RawMessage: the payload, kept byte for byte) are not looked into. nil when it
// finds nothing (or the JSON does not parse).
func FindFault(body []byte, t reflect.Type) *Fault {
	w := faultWalker{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	w.dec.UseNumber()
	f, _ := w.value(t, "")
	return f
}

type faultWalker struct {
	dec  *json.Decoder
	body []byte
}

// value reads one value for a Go value of type t at path: a fault, or nil; err when the
// JSON cannot be read (nothing more is looked at).
func (w *faultWalker) value(t reflect.Type, path string) (*Fault, error) {
	for t.Kind() == reflect.Pointer && !t.Implements(unmarshalerType) {
		t = t.Elem()
	}
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		var skip json.RawMessage
		return nil, w.dec.Decode(&skip)
	}
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil || tok == nil { // null decodes into anything as nothing
		return nil, err
	}
	at := path
	if at == "" {
		at = "(body)"
	}
	wrong := func() (*Fault, error) {
		var got string
		switch v := tok.(type) {
		case json.Delim:
			got = map[json.Delim]string{'{': "object", '[': "array"}[v]
		case string:
			got = "string"
		case json.Number:
			got = "number " + v.String()
		case bool:
			got = "bool"
		}
		return &Fault{at, fmt.Sprintf("must be %s, not %s", jsonType(t.Kind().String()), got)}, nil
	}
	member := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return wrong()
		}
		for w.dec.More() {
			k, err := w.dec.Token()
			if err != nil {
				return nil, err
			}
			name, _ := k.(string)
			f, ok := fieldByJSONName(t, name)
			if !ok {
				return &Fault{member(name), "unknown field"}, nil
			}
			if fl, err := w.value(f.Type, member(jsonName(f))); fl != nil || err != nil {
				return fl, err
			}
		}
		_, err = w.dec.Token()
		return nil, err
	case reflect.Map:
		if tok != json.Delim('{') {
			return wrong()
		}
		for w.dec.More() {
			from := w.dec.InputOffset()
			k, err := w.dec.Token()
			if err != nil {
				return nil, err
			}
			if !validJSONString(rawString(w.body[from:w.dec.InputOffset()])) {
				return &Fault{at, "has a name that is not valid UTF-8"}, nil
			}
			name, _ := k.(string)
			if fl, err := w.value(t.Elem(), member(name)); fl != nil || err != nil {
				return fl, err
			}
		}
		_, err = w.dec.Token()
		return nil, err
	case reflect.Slice, reflect.Array:
		if tok != json.Delim('[') {
			return wrong()
		}
		for i := 0; w.dec.More(); i++ {
			if fl, err := w.value(t.Elem(), path+"["+strconv.Itoa(i)+"]"); fl != nil || err != nil {
				return fl, err
			}
		}
		_, err = w.dec.Token()
		return nil, err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return wrong()
		}
		if !validJSONString(rawString(w.body[start:w.dec.InputOffset()])) {
			return &Fault{at, "must be valid UTF-8 (it has bytes that are not, or an unpaired surrogate escape)"}, nil
		}
		return nil, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, ok := tok.(json.Number); !ok {
			return wrong()
		} else if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return wrong()
		}
		return nil, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n, ok := tok.(json.Number); !ok {
			return wrong()
		} else if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return wrong()
		}
		return nil, nil
	case reflect.Float32, reflect.Float64:
		if _, ok := tok.(json.Number); !ok {
			return wrong()
		}
		return nil, nil
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return wrong()
		}
		return nil, nil
	}
	// anything else (an interface): the rest of an object or array is skipped
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		for depth := 1; depth > 0; {
			t, err := w.dec.Token()
			if err != nil {
				return nil, err
			}
			switch t {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
	}
	return nil, nil
}

// rawString is the JSON string in raw, a token as read with what came before it (space, a
// comma or colon).
func rawString(raw []byte) []byte {
	if i := bytes.IndexByte(raw, '"'); i >= 0 {
		return raw[i:]
	}
	return raw
}

// fieldByJSONName is the exported field of struct t that encoding/json decodes the member
// name into: its JSON name exactly, else folding case.
func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	var folded reflect.StructField
	found := false
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() || f.Tag.Get("json") == "-" {
			continue
		}
		switch n := jsonName(f); {
		case n == name:
			return f, true
		case !found && strings.EqualFold(n, name):
			folded, found = f, true
		}
	}
	return folded, found
}

// jsonName is the member name of a struct field: its json tag's, else the field's own.
func jsonName(f reflect.StructField) string {
	if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" {
		return n
	}
	return f.Name
}

func JSONProblem(err error) httpx.Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return httpx.BadRequest("", fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		field := stripIndices(typ.Field)
		if field == "" {
			field = "(body)"
		}
		return httpx.BadRequest(field, fmt.Sprintf("must be %s, not %s", jsonType(typ.Type.Kind().String()), typ.Value))
	case errors.Is(err, io.EOF):
		return httpx.BadRequest("", "the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return httpx.BadRequest("", "malformed JSON: unexpected end of the body")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return httpx.BadRequest(f, "unknown field")
	}
	return httpx.BadRequest("", "malformed JSON: "+err.Error())
}

func jsonType(kind string) string {
	switch kind {
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "int64", "int", "int32", "int16", "int8":
		return "an integer"
	case "uint64", "uint", "uint32", "uint16", "uint8":
		return "a whole number ≥ 0"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	}
	return "a " + kind
}

func ValidateDomain(d string) *httpx.Problem {
	if d == "" {
		p := httpx.BadRequest("domain", "is required")
		return &p
	}
	if len(d) > MaxDomainBytes || !utf8.ValidString(d) {
		p := httpx.BadRequest("domain", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxDomainBytes))
		return &p
	}
	return nil
}

func ValidateEntries(field string, es []Entry) *httpx.Problem {
	if len(es) == 0 {
		p := httpx.BadRequest(field, "is required: a list of {key, value} entries")
		return &p
	}
	if len(es) > MaxDescriptorEntries {
		p := httpx.BadRequest(field, fmt.Sprintf("has %d entries; at most %d", len(es), MaxDescriptorEntries))
		return &p
	}
	for i, e := range es {
		at := field + "[" + strconv.Itoa(i) + "]"
		if e.Key == "" {
			p := httpx.BadRequest(at+".key", "is required")
			return &p
		}
		if len(e.Key) > MaxKeyBytes || !utf8.ValidString(e.Key) {
			p := httpx.BadRequest(at+".key", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxKeyBytes))
			return &p
		}
		if len(e.Value) > MaxKeyBytes || !utf8.ValidString(e.Value) {
			p := httpx.BadRequest(at+".value", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxKeyBytes))
			return &p
		}
	}
	return nil
}

// stripIndices drops the array indices Go 1.27's encoding/json puts in an error's field
// path ("descriptor.0.value"), so problems name fields alike on every Go version
// ("descriptor.value", as Go 1.26 does).
func stripIndices(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil || p == "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}
