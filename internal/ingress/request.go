package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/rules"
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

// submitRequest is the body of POST /v1/messages.
type submitRequest struct {
	Domain         string          `json:"domain"`
	Descriptor     []entry         `json:"descriptor"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
	// DeliverAt (RFC 3339) or Delay (a duration such as "90s" or "24h") asks for delivery
	// no earlier than that time: the message waits in the retry stream until then.
	DeliverAt string `json:"deliver_at"`
	Delay     string `json:"delay"`
	// ExpiresAt (RFC 3339) or TTL (a duration, from now) is when the message stops being
	// worth delivering: still waiting then, it goes to the dead letters as expired.
	ExpiresAt string `json:"expires_at"`
	TTL       string `json:"ttl"`
	// Headers reach the sink with the message (HTTP headers, or NATS headers): see
	// checkHeaders for the limits.
	Headers map[string]string `json:"headers"`

	// traceParent and traceState are the request's W3C trace context headers, stored
	// with the message (telemetry).
	traceParent, traceState string

	// idemEmpty: the body gave "idempotency_key" as "" (validate refuses it; decoded, it
	// looks like no key).
	idemEmpty bool

	at      time.Time     // DeliverAt parsed (validate)
	delay   time.Duration // Delay parsed (validate)
	expires time.Time     // ExpiresAt parsed (validate)
	ttl     time.Duration // TTL parsed (validate)
}

// expiresAt is when the message expires: its own expires_at or ttl, or its rule's max_age,
// whichever comes first; zero for never.
func (req *submitRequest) expiresAt(now time.Time, maxAge time.Duration) time.Time {
	t := req.expires
	if req.ttl > 0 {
		t = now.Add(req.ttl)
	}
	if maxAge > 0 && (t.IsZero() || now.Add(maxAge).Before(t)) {
		t = now.Add(maxAge)
	}
	return t
}

// deliverAt is when the message may be delivered at the earliest; zero for at once.
func (req *submitRequest) deliverAt(now time.Time) time.Time {
	switch {
	case !req.at.IsZero():
		return req.at
	case req.delay > 0:
		return now.Add(req.delay)
	}
	return time.Time{}
}

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// checkRequest is the body of POST /v1/check (envoy's /json shape). Every field may also
// be spelled as protojson spells it (hitsAddend, requestsPerUnit, unitMultiplier,
// isNegativeHits), as envoy's /json reads it; those take a number or a string of digits
// (protojson writes 64-bit integers as strings). Setting both spellings is refused.
type checkRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries         []entry   `json:"entries"`
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
func (req *checkRequest) normalize() *httpx.Problem {
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

// decodeJSON decodes one submission as serveSubmit does, its media type checked
// (submitMediaType), with encoding/json alone: what decodeSubmit's scanner is held to
// (TestScanOneDecodesAsTheDecoder, FuzzSubmitBody).
func decodeJSON(r *http.Request, body []byte, v any) *httpx.Problem {
	if _, p := submitMediaType(r); p != nil {
		return p
	}
	return decodeJSONBytes(body, v)
}

// The 415's detail of a check.
const checkTypes = "Content-Type must be application/json"

// checkJSONType refuses a request whose Content-Type is set and not JSON, with detail.
func checkJSONType(r *http.Request, detail string) *httpx.Problem {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		p := httpx.UnsupportedMediaType(detail)
		return &p
	}
	return nil
}

// submitMedia is what a submission's Content-Type says its body is.
type submitMedia uint8

const (
	mediaJSON   submitMedia = iota + 1 // application/json: one submission, or a JSON array of them
	mediaNDJSON                        // application/x-ndjson or application/jsonl: a batch, one per line
)

// submitMediaType reads the Content-Type of POST /v1/messages: application/json,
// application/x-ndjson or application/jsonl (parameters allowed; a charset, if any, utf-8).
// Anything else, and no Content-Type at all, is a 415 naming the header. A browser sends a
// cross-site POST without asking the server first (no CORS preflight) only with a form's
// types or text/plain — or, from a Blob without a type, with none — so refusing every type
// but these (and the missing one) keeps another origin's page from submitting with a
// visitor's network position, whatever the body holds.
func submitMediaType(r *http.Request) (submitMedia, *httpx.Problem) {
	vs := r.Header.Values("Content-Type")
	if len(vs) == 1 && vs[0] == "application/json" { // what nearly every client sends
		return mediaJSON, nil
	}
	refuse := func(detail string) (submitMedia, *httpx.Problem) {
		p := httpx.UnsupportedMediaType("Content-Type " + detail + ": give application/json (one submission or a JSON array), " +
			"or application/x-ndjson (a batch, one submission per line)")
		p.Field = "Content-Type"
		return 0, &p
	}
	switch {
	case len(vs) == 0 || (len(vs) == 1 && strings.TrimSpace(vs[0]) == ""):
		return refuse("is required")
	case len(vs) > 1:
		return refuse("is given more than once")
	}
	mt, params, err := mime.ParseMediaType(vs[0])
	if err != nil {
		return refuse(strconv.Quote(vs[0]) + " does not parse")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return refuse("charset " + strconv.Quote(cs) + " is not utf-8 (JSON is UTF-8, RFC 8259)")
	}
	switch mt {
	case "application/json":
		return mediaJSON, nil
	case "application/x-ndjson", "application/jsonl":
		return mediaNDJSON, nil
	}
	return refuse(strconv.Quote(mt) + " is not taken")
}

// decodeSubmit decodes the body of one submission into req: a plain one (string fields, a
// descriptor of {"key","value"} objects and a payload: what scanArray takes as a batch
// item) by the batch's scanner, without encoding/json's reflection; any other by
// decodeJSON, which also words every problem. Both give the same request for a plain body
// (TestScanOneDecodesAsTheDecoder). Single submissions are most of the admission traffic:
// in TestAdmissionReport's profile encoding/json took 6.2 % of the process's CPU, about
// 6.6 µs per request, against under 1 µs for the scanner (BenchmarkDecodeSubmit). (An
// earlier hand-written decoder, fastjson.go, was removed in v0.4.0 when it measured 3 %;
// the scanner is shared with batches, so nothing is kept for this alone.)
// An Idempotency-Key header is checked here too, and named when at fault: present, it is
// 1–256 bytes of UTF-8, once (serveSubmit then takes it when the body has no key).
func decodeSubmit(r *http.Request, body []byte, req *submitRequest) *httpx.Problem {
	if p := checkIdempotencyHeader(r); p != nil {
		return p
	}
	if scanOne(body, req) {
		return nil
	}
	*req = submitRequest{}
	return decodeJSONBytes(body, req)
}

// checkIdempotencyHeader refuses an Idempotency-Key header that is empty, longer than 256
// bytes, not UTF-8, or given more than once, naming the header (not the body's field).
func checkIdempotencyHeader(r *http.Request) *httpx.Problem {
	vs := r.Header.Values("Idempotency-Key")
	var detail string
	switch {
	case len(vs) == 0:
		return nil
	case len(vs) > 1:
		detail = "is given more than once"
	case vs[0] == "":
		detail = fmt.Sprintf("is empty: give 1–%d bytes, or leave the header out", MaxIdempotencyKeyBytes)
	case len(vs[0]) > MaxIdempotencyKeyBytes || !utf8.ValidString(vs[0]):
		detail = fmt.Sprintf("must be valid UTF-8 of 1–%d bytes", MaxIdempotencyKeyBytes)
	default:
		return nil
	}
	p := httpx.BadRequest("Idempotency-Key", detail)
	return &p
}

// decodeJSONBytes decodes exactly one JSON value into v, refusing unknown fields and any
// string decoded into a Go string (a domain, a key, a header) that is not valid UTF-8:
// encoding/json would replace its bytes with U+FFFD, and two different keys would become
// one. A problem names the field with its whole path (descriptor[0].value), which
// encoding/json's errors do not give (findFault).
func decodeJSONBytes(body []byte, v any) *httpx.Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		p := jsonProblem(err)
		var syn *json.SyntaxError
		if !errors.As(err, &syn) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			if f := findFault(body, reflect.TypeOf(v).Elem()); f != nil {
				p = httpx.BadRequest(f.field, f.detail)
			}
		}
		return &p
	}
	if _, err := dec.Token(); err != io.EOF {
		p := httpx.BadRequest("", "the body must hold exactly one JSON object")
		return &p
	}
	if mayHoldBadStrings(body) {
		if f := findFault(body, reflect.TypeOf(v).Elem()); f != nil {
			p := httpx.BadRequest(f.field, f.detail)
			return &p
		}
	}
	if req, ok := v.(*submitRequest); ok {
		markEmptyKey(body, req)
	}
	return nil
}

// markEmptyKey notes in req that body (one submission) gives "idempotency_key" as an empty
// string, which validate refuses: encoding/json decodes it as no key at all.
func markEmptyKey(body []byte, req *submitRequest) {
	if req.IdempotencyKey != "" || !containsFold(body, "idempotency_") {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimLeft(body, " \t\r\n,")))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return
		}
		if name, _ := k.(string); strings.EqualFold(name, "idempotency_key") { // encoding/json folds case
			if t, err := dec.Token(); err == nil && t == "" {
				req.idemEmpty = true
				return
			}
			continue // a string was the token; any other value did not decode
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return
		}
	}
}

// containsFold reports whether b holds s, lower-case ASCII, in any case of ASCII letters.
// (Unicode folding adds only the Kelvin sign to k and the long s to s: markEmptyKey looks
// for "idempotency_", which has neither.)
func containsFold(b []byte, s string) bool {
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

// mayHoldBadStrings reports whether body has bytes that are not UTF-8, or a \u escape of a
// UTF-16 surrogate (which, unpaired, encoding/json also decodes as U+FFFD): only then can a
// decoded string have been replaced, and findFault looks.
func mayHoldBadStrings(body []byte) bool {
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

// fault is what findFault found: the field (its whole path) and what is wrong with it.
type fault struct{ field, detail string }

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// findFault reads body, one JSON value, as encoding/json decodes it into a value of type t
// (unknown fields refused), and returns the first fault in the body's order: an unknown
// member, a value of the wrong JSON type or out of range, or a string decoded into a Go
// string (or a map's name) that is not valid UTF-8 or has an unpaired surrogate escape.
// The field is named with its whole path, as docs/http-api.md names fields: members joined
// by ".", array elements by their index (descriptor[0].value,
// descriptors[0].entries[1].key, headers.X-A). Values decoded by their own UnmarshalJSON
// (and json.RawMessage: the payload, kept byte for byte) are not looked into. nil when it
// finds nothing (or the JSON does not parse).
func findFault(body []byte, t reflect.Type) *fault {
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
func (w *faultWalker) value(t reflect.Type, path string) (*fault, error) {
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
	wrong := func() (*fault, error) {
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
		return &fault{at, fmt.Sprintf("must be %s, not %s", jsonType(t.Kind().String()), got)}, nil
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
				return &fault{member(name), "unknown field"}, nil
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
				return &fault{at, "has a name that is not valid UTF-8"}, nil
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
			return &fault{at, "must be valid UTF-8 (it has bytes that are not, or an unpaired surrogate escape)"}, nil
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

func jsonProblem(err error) httpx.Problem {
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

// validate checks the fields of a submit request; the first problem found is returned.
func (req *submitRequest) validate() *httpx.Problem {
	if p := validateDomain(req.Domain); p != nil {
		return p
	}
	if p := validateEntries("descriptor", req.Descriptor); p != nil {
		return p
	}
	if len(req.Payload) == 0 {
		p := httpx.BadRequest("payload", "is required (any JSON value)")
		return &p
	}
	if req.idemEmpty {
		p := httpx.BadRequest("idempotency_key", fmt.Sprintf("is empty: give 1–%d bytes, or leave it out", MaxIdempotencyKeyBytes))
		return &p
	}
	if len(req.IdempotencyKey) > MaxIdempotencyKeyBytes || !utf8.ValidString(req.IdempotencyKey) {
		p := httpx.BadRequest("idempotency_key", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxIdempotencyKeyBytes))
		return &p
	}
	if len(req.Headers) > 0 {
		hs, p := checkHeaders(req.Headers)
		if p != nil {
			return p
		}
		req.Headers = hs
	}
	if req.DeliverAt != "" && req.Delay != "" {
		p := httpx.BadRequest("delay", "give deliver_at or delay, not both")
		return &p
	}
	if req.DeliverAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.DeliverAt)
		if err != nil {
			p := httpx.BadRequest("deliver_at", "must be an RFC 3339 time such as 2026-11-26T09:00:00+09:00")
			return &p
		}
		req.at = t
	}
	if req.ExpiresAt != "" && req.TTL != "" {
		p := httpx.BadRequest("ttl", "give expires_at or ttl, not both")
		return &p
	}
	if req.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.ExpiresAt)
		if err != nil {
			p := httpx.BadRequest("expires_at", "must be an RFC 3339 time such as 2026-11-26T23:59:59+09:00")
			return &p
		}
		req.expires = t
	}
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			p := httpx.BadRequest("ttl", "must be a positive duration such as 90s, 15m or 36h")
			return &p
		}
		req.ttl = d
	}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 {
			p := httpx.BadRequest("delay", "must be a duration ≥ 0 such as 90s, 15m or 36h")
			return &p
		}
		req.delay = d
	}
	return nil
}

func validateDomain(d string) *httpx.Problem {
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

func validateEntries(field string, es []entry) *httpx.Problem {
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

func toRuleEntries(es []entry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.Key, Value: e.Value}
	}
	return out
}

// Limits of a submission's own headers.
const (
	MaxHeaders          = 16   // headers per message
	MaxHeaderNameBytes  = 64   // bytes of a name
	MaxHeaderValueBytes = 1024 // bytes of a value
	MaxHeadersBytes     = 4096 // bytes of every name and value together
)

// deniedHeaders are names a submission may not set: the transport's, the delivery's own
// (Content-Type, Idempotency-Key) and anything starting Sluice- or Nats- (checked apart);
// and those that would let a submitter forge who a delivery comes from or how it travelled
// (securityHeader).
var deniedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Content-Type": true, "Content-Encoding": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true, "Upgrade": true,
	"Te": true, "Trailer": true, "Proxy-Connection": true, "Expect": true, "Idempotency-Key": true,
}

// securityHeader reports whether a submission's header (canonical name) is one a sink may
// trust as the sender's or a proxy's, not the submitter's: credentials (Authorization,
// Cookie, anything Proxy-: Proxy-Authorization and the hop-by-hop Proxy-Connection),
// forwarding (Forwarded, X-Forwarded-*, X-Real-Ip: the client address a proxy vouches
// for) and the hop-by-hop headers (RFC 9110 7.6.1) that only a connection's own ends set.
// A sink behind a proxy that authenticates or allow-lists on these would take a
// submitter's forgery for sluice's word; refused at submit, so no stored message holds one.
func securityHeader(name string) bool {
	switch name {
	case "Authorization", "Cookie", "Forwarded", "X-Real-Ip", "Host",
		"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return strings.HasPrefix(name, "Proxy-") || strings.HasPrefix(name, "X-Forwarded-")
}

// checkHeaders validates a submission's headers and returns them with canonical names.
func checkHeaders(in map[string]string) (map[string]string, *httpx.Problem) {
	bad := func(field, detail string) (map[string]string, *httpx.Problem) {
		p := httpx.BadRequest(field, detail)
		return nil, &p
	}
	if len(in) > MaxHeaders {
		return bad("headers", fmt.Sprintf("has %d headers; at most %d", len(in), MaxHeaders))
	}
	out := make(map[string]string, len(in))
	total := 0
	for k, v := range in {
		field := "headers." + k
		if k == "" || len(k) > MaxHeaderNameBytes || !httpguts.ValidHeaderFieldName(k) {
			return bad("headers", fmt.Sprintf("%q is not a header name (a token of at most %d bytes)", k, MaxHeaderNameBytes))
		}
		name := textproto.CanonicalMIMEHeaderKey(k)
		if securityHeader(name) {
			return bad(field, "may not be set by a submission: credentials (Authorization, Cookie, Proxy-*), "+
				"forwarding (Forwarded, X-Forwarded-*, X-Real-Ip), Host and hop-by-hop headers are refused, "+
				"so that a delivery cannot be forged to look authenticated or proxied")
		}
		if deniedHeaders[name] || strings.HasPrefix(name, "Sluice-") || strings.HasPrefix(name, "Nats-") || strings.HasPrefix(name, "Webhook-") {
			return bad(field, "may not be set by a submission (transport, delivery, signature and Sluice-/Nats-/Webhook- headers are sluice's)")
		}
		// Leading and trailing spaces and tabs are no part of an HTTP field value (RFC 9110
		// 5.5): every receiver drops them, so they are dropped here, where the message is
		// stored, and the sink gets what was stored.
		v = strings.Trim(v, " \t")
		if len(v) > MaxHeaderValueBytes || !visibleASCII(v) {
			return bad(field, fmt.Sprintf("must be at most %d bytes of visible ASCII, spaces and tabs", MaxHeaderValueBytes))
		}
		if _, dup := out[name]; dup {
			return bad(field, "is given twice (header names are case-insensitive)")
		}
		total += len(name) + len(v)
		out[name] = v
	}
	if total > MaxHeadersBytes {
		return bad("headers", fmt.Sprintf("are %d bytes together; at most %d", total, MaxHeadersBytes))
	}
	return out, nil
}

// visibleASCII reports whether v is visible ASCII, spaces and tabs: a header value every
// HTTP stack passes on as it is (RFC 9110's obs-text, bytes ≥ 0x80, is not: a sink may read
// them as Latin-1, as UTF-8, or refuse them).
func visibleASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
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
