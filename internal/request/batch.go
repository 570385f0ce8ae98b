package request

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strconv"

	"github.com/sluice-io/sluice/internal/httpx"
)

// IsBatch reports whether a submission body is a batch: NDJSON, or a JSON array.
func IsBatch(media Media, body []byte) bool {
	if media == MediaNDJSON {
		return true
	}
	for _, c := range body {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '[':
			return true
		}
		return false
	}
	return false
}

// SplitBatch cuts a batch body into its items: the elements of a JSON array, or the
// non-empty lines of NDJSON.
func SplitBatch(body []byte) ([]json.RawMessage, *httpx.Problem) {
	var items []json.RawMessage
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(body, &items); err != nil {
			p := JSONProblem(err)
			return nil, &p
		}
		return items, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			items = append(items, json.RawMessage(bytes.Clone(line)))
		}
	}
	if err := sc.Err(); err != nil {
		p := httpx.BadRequest("", "could not read the NDJSON body: "+err.Error())
		return nil, &p
	}
	return items, nil
}

// Slices lends a batch the slice its items are decoded into and takes it back when the
// batch is answered: the ingress keeps them across batches (admit.SlicePool[Submit]),
// for a batch's requests are hundreds of bytes an item. nil allocates each time.
type Slices interface {
	Get(n int) []Submit
	Put([]Submit)
}

func get(pool Slices, n int) []Submit {
	if pool == nil {
		return make([]Submit, n)
	}
	return pool.Get(n)
}

func put(pool Slices, s []Submit) {
	if pool != nil {
		pool.Put(s)
	}
}

// DecodeBatch decodes a batch body (a JSON array, or NDJSON) of at most max items into
// its items: problems[i] is item i's own problem (it does not decode), p the whole batch's
// (not a batch, empty, too many items). reqs may come from pool: give it back (Put) once
// the batch is answered.
func DecodeBatch(body []byte, max int, pool Slices) (reqs []Submit, problems []*httpx.Problem, p *httpx.Problem) {
	if reqs, ok := decodeArray(body, max, pool); ok && len(reqs) > 0 {
		return reqs, make([]*httpx.Problem, len(reqs)), nil
	}
	raw, p := SplitBatch(body)
	if p != nil {
		return nil, nil, p
	}
	if len(raw) == 0 {
		p := httpx.BadRequest("items", "the batch is empty")
		return nil, nil, &p
	}
	if len(raw) > max {
		p := httpx.TooLarge("a batch carries at most " + strconv.Itoa(max) + " messages; this one has " + strconv.Itoa(len(raw)))
		p.Field = "items"
		return nil, nil, &p
	}
	reqs = make([]Submit, len(raw))
	problems = make([]*httpx.Problem, len(raw))
	for i, b := range raw {
		problems[i] = decodeJSONBytes(b, &reqs[i])
	}
	return reqs, problems, nil
}

// decodeArray decodes a JSON array of at most max submissions with one decoder, straight
// into their requests: what SplitBatch and decodeJSONBytes per item give for a body whose
// every item decodes, without a copy of each item and a decoder per item. ok is false for
// anything else (NDJSON, an item that does not decode, too many items): SplitBatch then
// cuts the body, so that each item's problem is its own.
func decodeArray(body []byte, max int, pool Slices) (reqs []Submit, ok bool) {
	if reqs, ok := scanArray(body, max, pool); ok {
		return reqs, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, false
	}
	reqs = get(pool, min(max, 1+len(body)/64))[:0]
	fail := func() ([]Submit, bool) {
		put(pool, reqs)
		return nil, false
	}
	bad := MayHoldBadStrings(body)
	for dec.More() {
		if len(reqs) == max {
			return fail()
		}
		reqs = append(reqs, Submit{})
		from := dec.InputOffset()
		if err := dec.Decode(&reqs[len(reqs)-1]); err != nil {
			return fail()
		}
		item := body[from:dec.InputOffset()]
		markEmptyKey(item, &reqs[len(reqs)-1])
		if bad && FindFault(bytes.TrimLeft(item, " \t\r\n,"), submitType) != nil {
			return fail() // a string encoding/json replaced: SplitBatch's items name it
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim(']') {
		return fail()
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail()
	}
	return reqs, true
}

var submitType = reflect.TypeFor[Submit]()

// scanArray decodes, without encoding/json's reflection, a JSON array of at most max
// submissions of the plainest shape: objects of the string fields, a non-empty
// descriptor of {"key","value"} objects and a payload, each field once and spelled as its
// tag, every string of printable ASCII without escapes, the payload any JSON value but
// null (checked by json.Valid and kept byte for byte, as json.RawMessage keeps it). It
// gives what decodeArray's decoder gives for such a body; for any other body (headers,
// escapes, other spellings, a syntax error) ok is false and the decoder decodes it.
// Decoding was the largest share of a batch item's handler CPU.
func scanArray(body []byte, max int, pool Slices) (reqs []Submit, ok bool) {
	sc := scanner{b: body}
	if !sc.byte('[') {
		return nil, false
	}
	reqs = get(pool, min(max, 1+len(body)/64))[:0]
	fail := func() ([]Submit, bool) {
		put(pool, reqs)
		return nil, false
	}
	if sc.byte(']') {
		return fail() // empty: decodeArray answers it
	}
	for {
		if len(reqs) == max {
			return fail()
		}
		reqs = append(reqs, Submit{})
		if !sc.request(&reqs[len(reqs)-1]) {
			return fail()
		}
		if sc.byte(',') {
			continue
		}
		if !sc.byte(']') {
			return fail()
		}
		sc.space()
		if sc.i != len(sc.b) {
			return fail()
		}
		return reqs, true
	}
}

// ScanOne decodes into req, as scanArray decodes an item, a body that is one plain
// submission and nothing else; false for any other body (req is then partly written).
func ScanOne(body []byte, req *Submit) bool {
	sc := scanner{b: body}
	if !sc.request(req) {
		return false
	}
	sc.space()
	return sc.i == len(sc.b)
}

// scanner reads the plain JSON scanArray takes, at b[i:].
type scanner struct {
	b []byte
	i int
}

func (sc *scanner) space() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// byte consumes c after any space; false (nothing consumed but space) if c is not next.
func (sc *scanner) byte(c byte) bool {
	sc.space()
	if sc.i < len(sc.b) && sc.b[sc.i] == c {
		sc.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (sc *scanner) str() (string, bool) {
	if !sc.byte('"') {
		return "", false
	}
	for j := sc.i; j < len(sc.b); j++ {
		switch c := sc.b[j]; {
		case c == '"':
			s := string(sc.b[sc.i:j])
			sc.i = j + 1
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// object reads an object's members, calling field for each name (after its colon);
// false when field does, or on anything but an object.
func (sc *scanner) object(field func(name string) bool) bool {
	if !sc.byte('{') {
		return false
	}
	if sc.byte('}') {
		return true
	}
	for {
		name, ok := sc.str()
		if !ok || !sc.byte(':') || !field(name) {
			return false
		}
		if sc.byte(',') {
			continue
		}
		return sc.byte('}')
	}
}

func (sc *scanner) request(req *Submit) bool {
	var seen uint16
	once := func(bit uint16) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	strField := func(bit uint16, dst *string) bool {
		if !once(bit) {
			return false
		}
		v, ok := sc.str()
		*dst = v
		return ok
	}
	return sc.object(func(name string) bool {
		switch name {
		case "domain":
			return strField(1<<0, &req.Domain)
		case "idempotency_key":
			ok := strField(1<<1, &req.IdempotencyKey)
			req.IdemEmpty = req.IdempotencyKey == "" // refused by validate, as decodeJSONBytes marks it
			return ok
		case "deliver_at":
			return strField(1<<2, &req.DeliverAt)
		case "delay":
			return strField(1<<3, &req.Delay)
		case "expires_at":
			return strField(1<<4, &req.ExpiresAt)
		case "ttl":
			return strField(1<<5, &req.TTL)
		case "time_zone":
			return strField(1<<8, &req.TimeZone)
		case "descriptor":
			return once(1<<6) && sc.descriptor(req)
		case "payload":
			return once(1<<7) && sc.payload(req)
		}
		return false
	})
}

func (sc *scanner) descriptor(req *Submit) bool {
	if !sc.byte('[') || sc.byte(']') {
		return false // not an array, or empty
	}
	for {
		var e Entry
		var seen uint8
		if !sc.object(func(name string) bool {
			var bit uint8
			var dst *string
			switch name {
			case "key":
				bit, dst = 1, &e.Key
			case "value":
				bit, dst = 2, &e.Value
			default:
				return false
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			v, ok := sc.str()
			*dst = v
			return ok
		}) {
			return false
		}
		req.Descriptor = append(req.Descriptor, e)
		if sc.byte(',') {
			continue
		}
		return sc.byte(']')
	}
}

// payload reads any JSON value but null: its extent found by skipping strings and
// counting brackets, its validity checked by json.Valid.
func (sc *scanner) payload(req *Submit) bool {
	sc.space()
	start, depth := sc.i, 0
	for sc.i < len(sc.b) {
		switch c := sc.b[sc.i]; c {
		case '"':
			sc.i++
			for sc.i < len(sc.b) && sc.b[sc.i] != '"' {
				if sc.b[sc.i] == '\\' {
					sc.i++
				}
				sc.i++
			}
			if sc.i >= len(sc.b) {
				return false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				goto end
			}
		}
		if depth < 0 {
			break
		}
		sc.i++
	}
end:
	if depth < 0 { // the closing bracket of the item's object
		depth = 0
	}
	if depth != 0 {
		return false
	}
	v := bytes.TrimRight(sc.b[start:sc.i], " \t\n\r")
	if len(v) == 0 || string(v) == "null" || !json.Valid(v) {
		return false
	}
	req.Payload = json.RawMessage(bytes.Clone(v))
	return true
}
