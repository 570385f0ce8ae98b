package ingress

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sluice-io/sluice/internal/httpx"
)

// The body of POST /v1/messages is decoded on every admission, and encoding/json's Decoder
// (reflection, a scan to find the value's end and a second scan to decode it, a copy of the
// body into its own buffer) was a visible share of an admission's CPU. decodeSubmit decodes the
// shapes clients actually send with a hand-written parser, and hands everything else to
// decodeJSON, so that the answer to any body, good or bad, is decided in one place: encoding/json.
// The fast parser therefore never produces an error of its own. It either decodes the body to
// exactly the value decodeJSON would produce, or gives up without touching the request.
// FuzzDecodeSubmit checks that the two agree.

// maxNestingDepth is the nesting depth at which encoding/json's scanner gives up: a value
// may sit inside at most this many objects and arrays, the outermost included.
const maxNestingDepth = 10000

// decodeSubmit decodes the body of POST /v1/messages into req, with the same result and the
// same problem as decodeJSON(r, body, req) for every body and Content-Type.
//
// The fast path takes a body of the documented shape whose field names are spelt exactly as
// documented and whose strings have no escapes and are valid UTF-8; the rest (escapes,
// case-insensitive names, unknown fields, wrong types, malformed JSON, trailing data, a
// repeated descriptor, more than MaxDescriptorEntries entries) goes through decodeJSON.
// Nothing decoded aliases body, which the server reuses for the next request.
func decodeSubmit(r *http.Request, body []byte, req *submitRequest) *httpx.Problem {
	// decodeJSON accepts a Content-Type that starts with application/json in any case, and
	// answers 415 to the rest. The exact lower-case prefix (or no header) is what clients send;
	// any other value goes to decodeJSON, which decides, so the 415 is worded in one place.
	if ct := r.Header.Get("Content-Type"); ct == "" || strings.HasPrefix(ct, "application/json") {
		if decodeSubmitFast(body, req) {
			return nil
		}
	}
	return decodeJSON(r, body, req)
}

// decodeSubmitFast decodes body into req and reports true if body is a submit request it can
// decode exactly as encoding/json would; otherwise it reports false and leaves req untouched.
func decodeSubmitFast(body []byte, req *submitRequest) bool {
	// encoding/json merges a body into a request that already holds values (a descriptor is
	// decoded into the existing entries). The server always decodes into a zero request, and
	// only that case is worth a second implementation.
	if req.Domain != "" || req.Descriptor != nil || req.Payload != nil || req.IdempotencyKey != "" {
		return false
	}
	s := submitScanner{data: body}
	if !s.scan() {
		return false
	}
	s.fill(req)
	return true
}

// span is the range data[start:end] of the body; the zero span is the empty string.
type span struct{ start, end int }

func (sp span) len() int { return sp.end - sp.start }

// entrySpan is one descriptor entry as ranges of the body.
type entrySpan struct{ key, value span }

// submitScanner is the fast parser: a first pass records where each field's value lies in the
// body (allocating nothing), and fill then copies the values out in one go.
type submitScanner struct {
	data []byte
	off  int // the next byte to read

	domain, idempotencyKey span
	payload                span // zero: absent
	// The entries are recorded in an array, so that the scanner lives on the stack; a
	// descriptor with more entries than validate allows is left to encoding/json.
	entries  [MaxDescriptorEntries]entrySpan
	nEntries int
	// descriptorArray says the descriptor was an array (perhaps empty): encoding/json then
	// sets a non-nil slice, while an absent or null descriptor leaves the field nil.
	descriptorArray bool
	descriptorSeen  bool
}

// scan parses the whole body and reports whether it had the shape the fast path decodes.
func (s *submitScanner) scan() bool {
	s.skipSpace()
	if !s.consume('{') {
		return false
	}
	s.skipSpace()
	if s.consume('}') {
		return s.atEnd()
	}
	for {
		s.skipSpace()
		name, ok := s.plainString()
		if !ok {
			return false
		}
		s.skipSpace()
		if !s.consume(':') {
			return false
		}
		s.skipSpace()
		// A duplicate field overwrites the earlier one, as in encoding/json. A name that is
		// not one of these four exactly is unknown, or one of them in another case (which
		// encoding/json accepts): either way it is decodeJSON's to answer.
		switch string(s.data[name.start:name.end]) {
		case "domain":
			ok = s.stringValue(&s.domain)
		case "descriptor":
			ok = s.descriptorValue()
		case "payload":
			ok = s.payloadValue()
		case "idempotency_key":
			ok = s.stringValue(&s.idempotencyKey)
		default:
			return false
		}
		if !ok {
			return false
		}
		s.skipSpace()
		if s.consume(',') {
			continue
		}
		return s.consume('}') && s.atEnd()
	}
}

// stringValue reads a string field's value into *dst. A null leaves *dst as it was, because
// encoding/json ignores null for a string: {"domain":"a","domain":null} has domain "a".
func (s *submitScanner) stringValue(dst *span) bool {
	if s.consumeNull() {
		return true
	}
	sp, ok := s.plainString()
	if ok {
		*dst = sp
	}
	return ok
}

// descriptorValue reads the descriptor: null, or an array of entries (each null or an object).
func (s *submitScanner) descriptorValue() bool {
	// encoding/json decodes a second descriptor into the first one's entries, merging them
	// field by field; nobody sends that, so it is left to encoding/json.
	if s.descriptorSeen {
		return false
	}
	s.descriptorSeen = true
	if s.consumeNull() {
		return true
	}
	if !s.consume('[') {
		return false
	}
	s.descriptorArray = true
	s.skipSpace()
	if s.consume(']') {
		return true
	}
	for {
		s.skipSpace()
		e, ok := s.entryValue()
		if !ok {
			return false
		}
		if s.nEntries == len(s.entries) {
			return false
		}
		s.entries[s.nEntries] = e
		s.nEntries++
		s.skipSpace()
		if s.consume(',') {
			continue
		}
		return s.consume(']')
	}
}

// entryValue reads one descriptor entry; a null entry is the zero entry, as in encoding/json.
func (s *submitScanner) entryValue() (entrySpan, bool) {
	var e entrySpan
	if s.consumeNull() {
		return e, true
	}
	if !s.consume('{') {
		return e, false
	}
	s.skipSpace()
	if s.consume('}') {
		return e, true
	}
	for {
		s.skipSpace()
		name, ok := s.plainString()
		if !ok {
			return e, false
		}
		s.skipSpace()
		if !s.consume(':') {
			return e, false
		}
		s.skipSpace()
		switch string(s.data[name.start:name.end]) {
		case "key":
			ok = s.stringValue(&e.key)
		case "value":
			ok = s.stringValue(&e.value)
		default:
			return e, false
		}
		if !ok {
			return e, false
		}
		s.skipSpace()
		if s.consume(',') {
			continue
		}
		return e, s.consume('}')
	}
}

// payloadValue records the payload, any JSON value, byte for byte as json.RawMessage holds
// it: from its first byte to its last, without the white space around it (a null payload is
// the four bytes null, not an absent one).
func (s *submitScanner) payloadValue() bool {
	// The payload sits inside the body's object, one level deep.
	end, ok := skipJSONValue(s.data, s.off, 1)
	if !ok {
		return false
	}
	s.payload = span{s.off, end}
	s.off = end
	return true
}

// fill copies the recorded values into req, which is the zero request.
func (s *submitScanner) fill(req *submitRequest) {
	// All the strings of a request are copied into one allocation and sliced from it, rather
	// than one allocation each (six for a two-entry descriptor): they are used, and dropped,
	// together with the request.
	n := s.domain.len() + s.idempotencyKey.len()
	entries := s.entries[:s.nEntries]
	for _, e := range entries {
		n += e.key.len() + e.value.len()
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(s.data[s.domain.start:s.domain.end])
	b.Write(s.data[s.idempotencyKey.start:s.idempotencyKey.end])
	for _, e := range entries {
		b.Write(s.data[e.key.start:e.key.end])
		b.Write(s.data[e.value.start:e.value.end])
	}
	all := b.String()
	// Slice all in the order it was written.
	cut := func(size int) string {
		v := all[:size]
		all = all[size:]
		return v
	}
	req.Domain = cut(s.domain.len())
	req.IdempotencyKey = cut(s.idempotencyKey.len())
	if s.descriptorArray {
		// make([]entry, 0) is non-nil, as encoding/json leaves an empty array.
		req.Descriptor = make([]entry, len(entries))
		for i, e := range entries {
			req.Descriptor[i] = entry{Key: cut(e.key.len()), Value: cut(e.value.len())}
		}
	}
	if s.payload.len() > 0 {
		req.Payload = append(json.RawMessage(nil), s.data[s.payload.start:s.payload.end]...)
	}
}

// plainString reads a string that decodes to its own bytes: no escapes (encoding/json would
// unescape them), no control characters (it refuses them), valid UTF-8 (it would replace
// invalid bytes with U+FFFD). It returns the range between the quotes.
func (s *submitScanner) plainString() (span, bool) {
	if !s.consume('"') {
		return span{}, false
	}
	start := s.off
	ascii := true
	for i := start; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(s.data[start:i]) {
				return span{}, false
			}
			s.off = i + 1
			return span{start, i}, true
		case c == '\\' || c < 0x20:
			return span{}, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return span{}, false
}

func (s *submitScanner) consumeNull() bool {
	end, ok := skipJSONLiteral(s.data, s.off, "null")
	if ok {
		s.off = end
	}
	return ok
}

func (s *submitScanner) consume(c byte) bool {
	if s.off < len(s.data) && s.data[s.off] == c {
		s.off++
		return true
	}
	return false
}

func (s *submitScanner) skipSpace() { s.off = skipJSONSpace(s.data, s.off) }

// atEnd skips the white space after the body's object and reports whether nothing else follows.
func (s *submitScanner) atEnd() bool {
	s.skipSpace()
	return s.off == len(s.data)
}

// skipJSONSpace returns the index of the first byte at or after i that is not JSON white space.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipJSONValue validates the JSON value that starts at data[i] (no white space before it)
// and returns the index just past it. depth is the number of objects and arrays that
// enclose the value; like encoding/json, it refuses to nest deeper than maxNestingDepth.
//
// It accepts exactly what encoding/json's scanner accepts (FuzzSkipJSONValue compares it
// with json.Valid): in particular a string may hold any byte from 0x20 up, invalid UTF-8
// included, since a json.RawMessage keeps the bytes as they are.
func skipJSONValue(data []byte, i, depth int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch c := data[i]; {
	case c == '{':
		return skipJSONObject(data, i, depth+1)
	case c == '[':
		return skipJSONArray(data, i, depth+1)
	case c == '"':
		return skipJSONString(data, i)
	case c == '-' || '0' <= c && c <= '9':
		return skipJSONNumber(data, i)
	case c == 't':
		return skipJSONLiteral(data, i, "true")
	case c == 'f':
		return skipJSONLiteral(data, i, "false")
	case c == 'n':
		return skipJSONLiteral(data, i, "null")
	}
	return i, false
}

// skipJSONObject skips the object at data[i], which is at nesting level depth.
func skipJSONObject(data []byte, i, depth int) (int, bool) {
	if depth > maxNestingDepth {
		return i, false
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	for {
		i = skipJSONSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = skipJSONString(data, i); !ok {
			return i, false
		}
		i = skipJSONSpace(data, i)
		if i >= len(data) || data[i] != ':' {
			return i, false
		}
		i = skipJSONSpace(data, i+1)
		if i, ok = skipJSONValue(data, i, depth); !ok {
			return i, false
		}
		i = skipJSONSpace(data, i)
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// skipJSONArray skips the array at data[i], which is at nesting level depth.
func skipJSONArray(data []byte, i, depth int) (int, bool) {
	if depth > maxNestingDepth {
		return i, false
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, true
	}
	for {
		i = skipJSONSpace(data, i)
		var ok bool
		if i, ok = skipJSONValue(data, i, depth); !ok {
			return i, false
		}
		i = skipJSONSpace(data, i)
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case ',':
			i++
		case ']':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// skipJSONString skips the string whose opening quote is data[i].
func skipJSONString(data []byte, i int) (int, bool) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(data) {
				return i, false
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return i, false
				}
				for _, h := range data[i+1 : i+5] {
					if !isHex(h) {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipJSONNumber skips the number at data[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipJSONNumber(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		i = skipDigits(data, i)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		i = skipDigits(data, i)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		i = skipDigits(data, i)
	}
	return i, true
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipJSONLiteral skips lit (true, false or null) at data[i].
func skipJSONLiteral(data []byte, i int, lit string) (int, bool) {
	// Comparing string(bytes) with a string does not copy the bytes.
	if string(data[i:min(i+len(lit), len(data))]) != lit {
		return i, false
	}
	return i + len(lit), true
}
