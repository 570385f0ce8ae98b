package ingress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/admit"
	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/request"
	"github.com/sluice-io/sluice/internal/telemetry"
)

// DefaultMaxBatch is the most messages one batch submission may carry.
const DefaultMaxBatch = 500

// The slices of a batch's items, kept for the next batches (admit.SlicePool).
var (
	requestPool    admit.SlicePool[submitRequest]
	answerPool     admit.SlicePool[byte]
	outcomePool    admit.SlicePool[outcome]
	submissionPool admit.SlicePool[submission]
	admissionPool  admit.SlicePool[admit.BatchAdmission]
)

// batchConcurrency bounds the keys of one batch whose items make round trips of their own
// (scheduled items, repeats of an idempotency key) at once.
const batchConcurrency = 64

// isBatch reports whether a submission body is a batch: NDJSON, or a JSON array.
func isBatch(media submitMedia, body []byte) bool {
	if media == mediaNDJSON {
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

// splitBatch cuts a batch body into its items: the elements of a JSON array, or the
// non-empty lines of NDJSON.
func splitBatch(body []byte) ([]json.RawMessage, *httpx.Problem) {
	var items []json.RawMessage
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(body, &items); err != nil {
			p := request.JSONProblem(err)
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

// handleBatch admits the items of a batch submission. Every item is answered on its own,
// in order (one bad item never fails the others), with the answer a submission of it alone
// would get. The items to admit now are admitted together (admit.AdmitBatch: one group of
// Redis counts, every message published asynchronously, every PubAck waited for); the items
// of one key enter its queue in the order given. The answer is 200 once every item has its
// answer: an item answered 202 is stored, and a client that lost the answer retries the
// batch with the same idempotency keys to learn which (repeats answer 200). Authorization
// is the exception: with -submit-tokens, an item the token may not submit (another domain)
// refuses the whole batch, 403 naming the item, before anything is admitted.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request, body []byte) {
	if len(r.Header.Values("Idempotency-Key")) > 0 { // even empty
		httpx.WriteProblem(w, httpx.BadRequest("Idempotency-Key", "a batch takes an idempotency_key per item, not the header"))
		return
	}
	reqs, problems, p := s.decodeBatch(body)
	if p != nil {
		httpx.WriteProblem(w, *p)
		return
	}
	defer requestPool.Put(reqs)
	ctx := r.Context()
	// Every item passes the authorization of a single submission, before any is admitted:
	// one item a token may not submit refuses the whole batch (403 naming the item), so
	// nothing of a batch that was not authorized whole is stored. An item that does not
	// decode is not looked at: it is answered 400 and stored neither way.
	for i := range reqs {
		if problems[i] != nil {
			continue
		}
		if p := submitRefused(ctx, reqs[i].Domain, i); p != nil {
			httpx.WriteProblem(w, *p)
			return
		}
	}
	items := outcomePool.Get(len(reqs))
	defer outcomePool.Put(items)
	subs := submissionPool.Get(len(reqs))
	defer submissionPool.Put(subs)
	adms := admissionPool.Get(len(reqs))[:0]
	defer func() { admissionPool.Put(adms) }()
	admOf := make([]int, len(reqs)) // items[i]'s index in adms
	var scheduled []int
	traceParent, traceState := telemetry.FromHTTP(r.Header)
	depth := prefersDepth(r.Header)
	for i := range reqs {
		req := &reqs[i]
		req.depth = depth
		if p := problems[i]; p != nil {
			items[i] = problemItem(*p, i)
			continue
		}
		if p := req.validate(); p != nil {
			items[i] = problemItem(*p, i)
			continue
		}
		req.traceParent, req.traceState = traceParent, traceState
		sub, o, ok := s.prepare(ctx, req)
		switch {
		case !ok:
			items[i] = batchOutcome(o, i)
		case !sub.at.IsZero():
			subs[i] = sub
			scheduled = append(scheduled, i)
		default:
			subs[i] = sub
			admOf[i] = len(adms)
			adms = append(adms, admit.BatchAdmission{Rule: sub.rule, Msg: sub.msg, Options: sub.options()})
		}
	}
	s.eachKey(reqs, scheduled, func(i int) {
		sub := &subs[i]
		items[i] = batchOutcome(s.schedule(ctx, sub.rule, sub.msg, sub.req, sub.at), i)
	})
	if len(adms) > 0 { // none when every item was answered already (refused, scheduled)
		s.cfg.Admitter.AdmitBatch(ctx, adms)
	}
	var repeats []int // repeats of an idempotency key: their owner is looked up
	for i := range subs {
		if subs[i].req == nil || !subs[i].at.IsZero() {
			continue
		}
		if a := &adms[admOf[i]]; a.Err == nil && a.Result.Decision == admit.KeyTaken {
			repeats = append(repeats, i)
			continue
		}
		items[i] = s.concludeItem(ctx, &subs[i], &adms[admOf[i]], i)
	}
	s.eachKey(reqs, repeats, func(i int) { items[i] = s.concludeItem(ctx, &subs[i], &adms[admOf[i]], i) })
	writeBatch(w, items)
}

// decodeBatch decodes a batch body into its items: problems[i] is item i's own problem
// (it does not decode), p the whole batch's (not a batch, empty, too many items).
func (s *Server) decodeBatch(body []byte) (reqs []submitRequest, problems []*httpx.Problem, p *httpx.Problem) {
	if reqs, ok := decodeArray(body, s.cfg.MaxBatch); ok && len(reqs) > 0 {
		return reqs, make([]*httpx.Problem, len(reqs)), nil
	}
	raw, p := splitBatch(body)
	if p != nil {
		return nil, nil, p
	}
	if len(raw) == 0 {
		p := httpx.BadRequest("items", "the batch is empty")
		return nil, nil, &p
	}
	if max := s.cfg.MaxBatch; len(raw) > max {
		p := httpx.TooLarge("a batch carries at most " + strconv.Itoa(max) + " messages; this one has " + strconv.Itoa(len(raw)))
		p.Field = "items"
		return nil, nil, &p
	}
	reqs = make([]submitRequest, len(raw))
	problems = make([]*httpx.Problem, len(raw))
	for i, b := range raw {
		problems[i] = decodeJSONBytes(b, &reqs[i])
	}
	return reqs, problems, nil
}

// decodeArray decodes a JSON array of at most max submissions with one decoder, straight
// into their requests: what splitBatch and decodeJSONBytes per item give for a body whose
// every item decodes, without a copy of each item and a decoder per item. ok is false for
// anything else (NDJSON, an item that does not decode, too many items): splitBatch then
// cuts the body, so that each item's problem is its own.
func decodeArray(body []byte, max int) (reqs []submitRequest, ok bool) {
	if reqs, ok := scanArray(body, max); ok {
		return reqs, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, false
	}
	reqs = requestPool.Get(min(max, 1+len(body)/64))[:0]
	fail := func() ([]submitRequest, bool) {
		requestPool.Put(reqs)
		return nil, false
	}
	bad := request.MayHoldBadStrings(body)
	for dec.More() {
		if len(reqs) == max {
			return fail()
		}
		reqs = append(reqs, submitRequest{})
		from := dec.InputOffset()
		if err := dec.Decode(&reqs[len(reqs)-1]); err != nil {
			return fail()
		}
		item := body[from:dec.InputOffset()]
		markEmptyKey(item, &reqs[len(reqs)-1])
		if bad && request.FindFault(bytes.TrimLeft(item, " \t\r\n,"), submitRequestType) != nil {
			return fail() // a string encoding/json replaced: splitBatch's items name it
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

var submitRequestType = reflect.TypeFor[submitRequest]()

// concludeItem is item i's answer from its admission.
func (s *Server) concludeItem(ctx context.Context, sub *submission, a *admit.BatchAdmission, i int) outcome {
	return batchOutcome(s.conclude(ctx, sub, a.Result, a.Err), i)
}

// eachKey runs f on the items at idx: those of one domain and descriptor (one queue key)
// one after the other in their order, different keys concurrently (at most
// batchConcurrency at once). It returns when every f has returned.
func (s *Server) eachKey(reqs []submitRequest, idx []int, f func(i int)) {
	if len(idx) == 0 {
		return
	}
	groups := map[string][]int{}
	var order []string
	for _, i := range idx {
		k := groupKey(&reqs[i])
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	sem := make(chan struct{}, batchConcurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range groups[k] {
				f(i)
			}
		})
	}
	wg.Wait()
}

// batchOutcome is a submission's answer as item i of a batch.
func batchOutcome(o outcome, i int) outcome {
	if o.problem != nil {
		return problemItem(*o.problem, i)
	}
	return o
}

// problemItem is an item's problem, its field prefixed with the item's index.
func problemItem(p httpx.Problem, i int) outcome {
	prefix := "[" + strconv.Itoa(i) + "]"
	if p.Field != "" {
		p.Field = prefix + "." + p.Field
	} else if p.Status == http.StatusBadRequest {
		p.Field = prefix
	}
	return problemOutcome(p)
}

// groupKey identifies an item's queue key before matching: its domain and descriptor.
func groupKey(req *submitRequest) string {
	var b []byte
	b = strconv.AppendQuote(b, req.Domain)
	for _, e := range req.Descriptor {
		b = strconv.AppendQuote(b, e.Key)
		b = strconv.AppendQuote(b, e.Value)
	}
	return string(b)
}

// writeBatch answers a batch: 200 with
//
//	{"accepted": 202s and 200s (repeats), "refused": the others, "items": [...]}
//
// one item per submission in order, each its status with the fields of its answer (a
// submission's 202 or 200 body, or its problem). It is written directly, as writeQueued
// writes a single answer: encoding/json's reflection over every item was a tenth of a
// batch item's CPU.
func writeBatch(w http.ResponseWriter, items []outcome) {
	accepted, depths := 0, false
	for i := range items {
		if items[i].status/100 == 2 {
			accepted++
		}
		depths = depths || (items[i].queued && items[i].depth > 0)
	}
	if depths {
		w.Header()["Preference-Applied"] = []string{PreferDepth}
	}
	b := answerPool.Get(64 + 200*len(items))[:0]
	defer func() { answerPool.Put(b) }()
	b = append(b, `{"accepted":`...)
	b = strconv.AppendInt(b, int64(accepted), 10)
	b = append(b, `,"refused":`...)
	b = strconv.AppendInt(b, int64(len(items)-accepted), 10)
	b = append(b, `,"items":[`...)
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, &items[i])
	}
	b = append(b, "]}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// appendItem appends one item of a batch's answer: a problem as itself (it carries its
// status), any other answer as {"status":…} followed by submitResponse's fields.
func appendItem(b []byte, o *outcome) []byte {
	if o.problem != nil {
		raw, err := json.Marshal(o.problem)
		if err != nil { // a Problem is strings and numbers: never
			raw = []byte(`{"status":500}`)
		}
		return append(b, raw...)
	}
	r := &o.resp
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(o.status), 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, r.ID)
	if r.State != "" {
		b = append(b, `,"state":`...)
		b = appendJSONString(b, r.State)
	}
	if o.queued {
		if o.depth > 0 { // known: the claim engine's count, or asked for (Prefer: return=representation)
			b = append(b, `,"depth":`...)
			b = strconv.AppendInt(b, o.depth, 10)
		}
		b = append(b, `,"capacity":`...)
		b = strconv.AppendInt(b, o.cap, 10)
		if !o.eta.IsZero() {
			b = append(b, `,"eta":"`...)
			b = o.eta.UTC().AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
	} else if r.ETA != "" {
		b = append(b, `,"eta":`...)
		b = appendJSONString(b, r.ETA)
	}
	if r.RetryAt != "" {
		b = append(b, `,"retry_at":`...)
		b = appendJSONString(b, r.RetryAt)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: quoted as it is when it holds only
// printable ASCII that needs no escape (ids, states, times), through json.Marshal otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(s)
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// scanArray decodes, without encoding/json's reflection, a JSON array of at most max
// submissions of the plainest shape: objects of the string fields, a non-empty
// descriptor of {"key","value"} objects and a payload, each field once and spelled as its
// tag, every string of printable ASCII without escapes, the payload any JSON value but
// null (checked by json.Valid and kept byte for byte, as json.RawMessage keeps it). It
// gives what decodeArray's decoder gives for such a body; for any other body (headers,
// escapes, other spellings, a syntax error) ok is false and the decoder decodes it.
// Decoding was the largest share of a batch item's handler CPU.
func scanArray(body []byte, max int) (reqs []submitRequest, ok bool) {
	sc := scanner{b: body}
	if !sc.byte('[') {
		return nil, false
	}
	reqs = requestPool.Get(min(max, 1+len(body)/64))[:0]
	fail := func() ([]submitRequest, bool) {
		requestPool.Put(reqs)
		return nil, false
	}
	if sc.byte(']') {
		return fail() // empty: decodeArray answers it
	}
	for {
		if len(reqs) == max {
			return fail()
		}
		reqs = append(reqs, submitRequest{})
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

// scanOne decodes into req, as scanArray decodes an item, a body that is one plain
// submission and nothing else; false for any other body (req is then partly written).
func scanOne(body []byte, req *submitRequest) bool {
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

func (sc *scanner) request(req *submitRequest) bool {
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
			req.idemEmpty = req.IdempotencyKey == "" // refused by validate, as decodeJSONBytes marks it
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

func (sc *scanner) descriptor(req *submitRequest) bool {
	if !sc.byte('[') || sc.byte(']') {
		return false // not an array, or empty
	}
	for {
		var e request.Entry
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
func (sc *scanner) payload(req *submitRequest) bool {
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
