package request

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/window"
)

// Submit is the body of POST /v1/messages.
type Submit struct {
	Domain         string          `json:"domain"`
	Descriptor     []Entry         `json:"descriptor"`
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
	// CheckHeaders for the limits.
	Headers map[string]string `json:"headers"`
	// TimeZone is the message's IANA zone, for a rule whose delivery.window follows each
	// message's (time_zone: from_message); stored as the Sluice-Time-Zone header.
	TimeZone string `json:"time_zone"`

	// TraceParent and TraceState are the request's W3C trace context headers, stored
	// with the message (telemetry); set by the handler, never decoded.
	TraceParent string `json:"-"`
	TraceState  string `json:"-"`

	// Depth: the request asked for the key's depth and the message's eta in its 202
	// (Prefer: return=representation), which under the own engine costs a stream
	Depth bool `json:"-"`

	// IdemEmpty: the body gave "idempotency_key" as "" (Validate refuses it; decoded, it
	// looks like no key).
	IdemEmpty bool `json:"-"`

	at      time.Time     // DeliverAt parsed (validate)
	delay   time.Duration // Delay parsed (validate)
	expires time.Time     // ExpiresAt parsed (validate)
	ttl     time.Duration // TTL parsed (validate)
}

// MessageHeaders are the message's headers: the submission's own, and its time_zone as
// Sluice-Time-Zone (a header a submission may not set itself: CheckHeaders refuses
// Sluice-*), for a rule whose delivery.window follows each message's zone.
func (req *Submit) MessageHeaders() map[string]string {
	if req.TimeZone == "" {
		return req.Headers
	}
	hs := make(map[string]string, len(req.Headers)+1)
	for k, v := range req.Headers {
		hs[k] = v
	}
	hs[window.HeaderTimeZone] = req.TimeZone
	return hs
}

// Expiry is when the message expires: its own expires_at or ttl, or its rule's max_age,
// whichever comes first; zero for never.
func (req *Submit) Expiry(now time.Time, maxAge time.Duration) time.Time {
	t := req.expires
	if req.ttl > 0 {
		t = now.Add(req.ttl)
	}
	if maxAge > 0 && (t.IsZero() || now.Add(maxAge).Before(t)) {
		t = now.Add(maxAge)
	}
	return t
}

// DeliveryTime is when the message may be delivered at the earliest; zero for at once.
func (req *Submit) DeliveryTime(now time.Time) time.Time {
	switch {
	case !req.at.IsZero():
		return req.at
	case req.delay > 0:
		return now.Add(req.delay)
	}
	return time.Time{}
}

// DecodeSubmitJSON decodes one submission as internal/submit does, its media type checked
// (SubmitMediaType), with encoding/json alone: what DecodeSubmit's scanner is held to
// (TestScanOneDecodesAsTheDecoder, FuzzSubmitBody).
func DecodeSubmitJSON(r *http.Request, body []byte, v any) *httpx.Problem {
	if _, p := SubmitMediaType(r); p != nil {
		return p
	}
	return decodeJSONBytes(body, v)
}

// Media is what a submission's Content-Type says its body is.
type Media uint8

const (
	MediaJSON   Media = iota + 1 // application/json: one submission, or a JSON array of them
	MediaNDJSON                  // application/x-ndjson or application/jsonl: a batch, one per line
)

// SubmitMediaType reads the Content-Type of POST /v1/messages: application/json,
// application/x-ndjson or application/jsonl (parameters allowed; a charset, if any, utf-8).
// Anything else, and no Content-Type at all, is a 415 naming the header. A browser sends a
// cross-site POST without asking the server first (no CORS preflight) only with a form's
// types or text/plain — or, from a Blob without a type, with none — so refusing every type
// but these (and the missing one) keeps another origin's page from submitting with a
// visitor's network position, whatever the body holds.
func SubmitMediaType(r *http.Request) (Media, *httpx.Problem) {
	vs := r.Header.Values("Content-Type")
	if len(vs) == 1 && vs[0] == "application/json" { // what nearly every client sends
		return MediaJSON, nil
	}
	refuse := func(detail string) (Media, *httpx.Problem) {
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
		return MediaJSON, nil
	case "application/x-ndjson", "application/jsonl":
		return MediaNDJSON, nil
	}
	return refuse(strconv.Quote(mt) + " is not taken")
}

// DecodeSubmit decodes the body of one submission into req: a plain one (string fields, a
// descriptor of {"key","value"} objects and a payload: what scanArray takes as a batch
// item) by the batch's scanner, without encoding/json's reflection; any other by
// DecodeSubmitJSON, which also words every problem. Both give the same request for a plain body
// (TestScanOneDecodesAsTheDecoder). Single submissions are most of the admission traffic:
// in TestAdmissionReport's profile encoding/json took 6.2 % of the process's CPU, about
// 6.6 µs per request, against under 1 µs for the scanner (BenchmarkDecodeSubmit). (An
// earlier hand-written decoder, fastjson.go, was removed in v0.4.0 when it measured 3 %;
// the scanner is shared with batches, so nothing is kept for this alone.)
// An Idempotency-Key header is checked here too, and named when at fault: present, it is
// 1–256 bytes of UTF-8, once (internal/submit then takes it when the body has no key).
func DecodeSubmit(r *http.Request, body []byte, req *Submit) *httpx.Problem {
	if p := CheckIdempotencyHeader(r); p != nil {
		return p
	}
	if ScanOne(body, req) {
		return nil
	}
	*req = Submit{}
	return decodeJSONBytes(body, req)
}

// CheckIdempotencyHeader refuses an Idempotency-Key header that is empty, longer than 256
// bytes, not UTF-8, or given more than once, naming the header (not the body's field).
func CheckIdempotencyHeader(r *http.Request) *httpx.Problem {
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

// decodeJSONBytes is DecodeJSON, and for a submission notes an empty
// "idempotency_key" (markEmptyKey).
func decodeJSONBytes(body []byte, v any) *httpx.Problem {
	if p := DecodeJSON(body, v); p != nil {
		return p
	}
	if req, ok := v.(*Submit); ok {
		markEmptyKey(body, req)
	}
	return nil
}

// markEmptyKey notes in req that body (one submission) gives "idempotency_key" as an empty
// string, which validate refuses: encoding/json decodes it as no key at all.
func markEmptyKey(body []byte, req *Submit) {
	if req.IdempotencyKey != "" || !ContainsFold(body, "idempotency_") {
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
				req.IdemEmpty = true
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

// Validate checks the fields of a submit request; the first problem found is returned.
func (req *Submit) Validate() *httpx.Problem {
	if p := ValidateDomain(req.Domain); p != nil {
		return p
	}
	if p := ValidateEntries("descriptor", req.Descriptor); p != nil {
		return p
	}
	if len(req.Payload) == 0 {
		p := httpx.BadRequest("payload", "is required (any JSON value)")
		return &p
	}
	if req.IdemEmpty {
		p := httpx.BadRequest("idempotency_key", fmt.Sprintf("is empty: give 1–%d bytes, or leave it out", MaxIdempotencyKeyBytes))
		return &p
	}
	if len(req.IdempotencyKey) > MaxIdempotencyKeyBytes || !utf8.ValidString(req.IdempotencyKey) {
		p := httpx.BadRequest("idempotency_key", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxIdempotencyKeyBytes))
		return &p
	}
	if len(req.Headers) > 0 {
		hs, p := CheckHeaders(req.Headers)
		if p != nil {
			return p
		}
		req.Headers = hs
	}
	if req.TimeZone != "" {
		if _, err := window.LoadZone(req.TimeZone); err != nil {
			p := httpx.BadRequest("time_zone", fmt.Sprintf("%q is %v", req.TimeZone, err))
			return &p
		}
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

// CheckHeaders validates a submission's headers and returns them with canonical names.
func CheckHeaders(in map[string]string) (map[string]string, *httpx.Problem) {
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

// PreferDepth is the preference (RFC 7240) by which a submission asks for its key's depth
// and its eta in the 202: "Prefer: return=representation". The own engine writes no depth
// counts on admission, so these cost a stream request after the publish, which only the
// callers who read them should pay; the claim engine's admission counts them anyway and
// always answers them. A 202 that carries them says "Preference-Applied: return=representation".
const PreferDepth = "return=representation"

// PrefersDepth reports whether h's Prefer fields ask for return=representation (a
// preference's parameters after ';' and a quoted value are allowed; names and the value
// are case-insensitive).
func PrefersDepth(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if ok && strings.EqualFold(strings.TrimSpace(name), "return") &&
				strings.EqualFold(strings.Trim(strings.TrimSpace(val), `"`), "representation") {
				return true
			}
		}
	}
	return false
}

// Digest identifies a submission for its idempotency key: a hash of its domain, descriptor
// and payload (compacted, so whitespace does not count), 22 characters; "" without a key.
func (req *Submit) Digest() string {
	if req.IdempotencyKey == "" {
		return ""
	}
	// The bytes hashed are fixed across versions (a claim's digest is compared by every
	// ingress that sees a repeat): length-prefixed fields, then the payload without
	// insignificant whitespace. They are built in one buffer and hashed at once.
	var stack [512]byte
	b := stack[:0]
	field := func(s string) { // length-prefixed: no two requests write the same bytes
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(req.Domain)
	for _, e := range req.Descriptor {
		field(e.Key)
		field(e.Value)
	}
	if bytes.IndexAny(req.Payload, " \t\r\n") < 0 {
		b = append(b, req.Payload...) // compact already (json.Compact only drops whitespace)
	} else if compact := bytes.NewBuffer(b); json.Compact(compact, req.Payload) == nil {
		b = compact.Bytes()
	} else {
		b = append(b, req.Payload...)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}
