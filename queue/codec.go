package queue

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxKeyBytes is the longest key sluice accepts (docs/http-api.md "Conventions": any UTF-8 string up to 256 bytes).
const MaxKeyBytes = 256

// ErrBadKey is returned for a key longer than MaxKeyBytes or not valid UTF-8.
var ErrBadKey = errors.New("queue: key must be valid UTF-8 of at most 256 bytes")

// ErrBadMessage is returned when a stored NATS message is not a sluice Message.
var ErrBadMessage = errors.New("queue: not a sluice message")

// keyTokenPrefix starts every key token. base64url (no padding) of a non-empty key is at
// least 2 characters, and the empty key would otherwise give an empty token, which is not
// a valid subject token; a fixed first letter makes every key — including "" — one
// non-empty token with a single rule and no special case. It also leaves room for a
// future encoding (e.g. "h" + hash for longer keys) without ambiguity.
const keyTokenPrefix = "k"

// KeyToken encodes a key into one subject token: "k" + base64url without padding. The
// alphabet is [A-Za-z0-9_-], so the token can never contain '.', '*', '>', whitespace or
// any other character NATS treats as syntax, and the mapping is injective (distinct keys
// get distinct tokens), so no key can address another key's queue. A 256-byte key gives
// a 1+342 = 343-character token (4·⌈256/3⌉ − 2 padding characters dropped); subjects of
// that length cost nothing special in NATS (measured: publish, per-subject GetMsg and
// subject-filtered Info behave the same as for short subjects).
func KeyToken(key string) string {
	return string(appendKeyToken(make([]byte, 0, keyTokenLen(key)), key))
}

func keyTokenLen(key string) int {
	return len(keyTokenPrefix) + base64.RawURLEncoding.EncodedLen(len(key))
}

func appendKeyToken(b []byte, key string) []byte {
	b = append(b, keyTokenPrefix...)
	return base64.RawURLEncoding.AppendEncode(b, []byte(key)) // no copy of key: the conversion does not escape
}

// KeyFromToken reverses KeyToken. It accepts only what KeyToken writes (strict base64:
// unused trailing bits must be zero), so a key has one token and a token one key.
func KeyFromToken(token string) (string, error) {
	rest, ok := strings.CutPrefix(token, keyTokenPrefix)
	if !ok {
		return "", fmt.Errorf("queue: key token %q: missing %q prefix", token, keyTokenPrefix)
	}
	// The decoder skips \r and \n: "k\r" would be a second token of the empty key.
	if strings.ContainsAny(rest, "\r\n") {
		return "", fmt.Errorf("queue: key token %q: not base64url", token)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("queue: key token %q: %w", token, err)
	}
	return string(b), nil
}

// CheckKey reports ErrBadKey for a key sluice does not accept.
func CheckKey(key string) error {
	if len(key) > MaxKeyBytes || !utf8.ValidString(key) {
		return ErrBadKey
	}
	return nil
}

// RuleToken turns a rule name into something safe as a stream name, a subject token and a
// Redis hash tag: [A-Za-z0-9_-] only. Names that are already safe are kept as they are (so
// streams and Redis keys stay readable); any other name has its unsafe characters
// replaced by '_' and a short hash of the original appended, so two rules whose names
// differ only in unsafe characters (e.g. "orders.m" and "orders_m") never share a stream
// or a Redis slot.
func RuleToken(rule string) string {
	safe := true
	for i := 0; i < len(rule); i++ {
		if !tokenByte(rule[i]) {
			safe = false
			break
		}
	}
	if safe && rule != "" && len(rule) <= 64 {
		return rule
	}
	var b strings.Builder
	for i := 0; i < len(rule) && b.Len() < 48; i++ {
		if c := rule[i]; tokenByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(rule))
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(sum[:5]))
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// EncodeMessage builds the NATS wire form of m for subject: the payload byte-for-byte as
// data, everything else in headers (see the Header* constants). Header values are ASCII:
// the key is percent-encoded like a URL path segment, times are RFC 3339 with nanoseconds,
// and LastError is percent-encoded too because it may hold any text, including newlines.
//
// The header is built directly (its names are constants already in canonical form, with
// one backing array for the values) instead of through Header.Set: this runs once per
// admission, and the canonicalisation and one slice per value were a tenth of its
// allocations.
func EncodeMessage(subject string, m Message) *nats.Msg { return encodeMessage(subject, m, "", false) }

// encodeMessage is EncodeMessage, with the Nats-Expected-Stream header set to stream when
// it is not "" (what jetstream.WithExpectStream sets, without the option's allocations).
// The map is made for exactly its headers: up to 8 it is one group of slots, where a hint
// above 8 made a table of 16 (twice the bytes to allocate, clear and iterate in nats.go's
// headerBytes).
//
// lean writes the lean form (format 3) of a message admitted for the first time: the
// rule, the key and the creation time are left out, because its stream keeps them
// already — the stream is the rule's, the subject's last token is the key's (KeyToken) —
// or its id does: the time in its uuid v7 is when the ingress issued it, a moment before
// it was admitted (IssuedAt). The three headers were two thirds
// of a plain admission's header bytes, which the server scans once per header it looks
// for (msg id, expected stream, schedule, TTL, ...). Read with DecodeStored.
func encodeMessage(subject string, m Message, stream string, lean bool) *nats.Msg {
	n := 2 + len(m.Headers) // format, and one spare (EnqueueAs's Sluice-Id)
	if !lean {
		n += 2 // rule, key
	}
	for _, set := range [...]bool{m.ID != "", !lean && !m.CreatedAt.IsZero(), m.Attempt != 0, m.LastError != "",
		!m.ParkedFrom.IsZero(), !m.ExpiresAt.IsZero(), m.TraceParent != "", m.TraceParent != "" && m.TraceState != "", stream != ""} {
		if set {
			n++
		}
	}
	vals := make([]string, 0, n)
	h := make(nats.Header, n)
	put := func(name, v string) {
		vals = append(vals, v)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if lean {
		put(HeaderFormat, leanFormatVersion)
	} else {
		put(HeaderFormat, fullFormatVersion)
	}
	if m.ID != "" {
		put(HeaderMsgID, m.ID)
	}
	if !lean {
		put(HeaderRule, m.Rule)
		put(HeaderKey, url.PathEscape(m.Key))
		if !m.CreatedAt.IsZero() {
			put(HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if m.Attempt != 0 {
		put(HeaderAttempt, strconv.Itoa(m.Attempt))
	}
	if m.LastError != "" {
		put(HeaderLastError, url.PathEscape(m.LastError))
	}
	if !m.ParkedFrom.IsZero() {
		put(HeaderParkedFrom, m.ParkedFrom.UTC().Format(time.RFC3339Nano))
	}
	if !m.ExpiresAt.IsZero() {
		put(HeaderExpiresAt, m.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if m.TraceParent != "" {
		put(HeaderTraceParent, m.TraceParent)
		if m.TraceState != "" {
			put(HeaderTraceState, m.TraceState)
		}
	}
	for k, v := range m.Headers {
		put(HeaderPrefixUser+k, v)
	}
	if stream != "" {
		put(jetstream.ExpectedStreamHeader, stream)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: m.Payload}
}

// The versions written in HeaderFormat: the full form's (2) and the lean form's (3,
// FormatVersion).
var (
	fullFormatVersion = "2"
	leanFormatVersion = strconv.Itoa(FormatVersion)
)

// Stored is what a stream keeps of a message besides its headers and data: the rule whose
// stream holds it, the key of its subject, and when the stream stored it. A message in the
// lean form (format 3) takes its rule and key from here, and its creation time from its id
// (IssuedAt; At when the id has none).
type Stored struct {
	Rule, Key string
	At        time.Time
}

// errLeanWithoutStream: a lean message read without what its stream keeps of it.
var errLeanWithoutStream = fmt.Errorf("%w: a lean message (%s %s) read without its stream's rule and time", ErrBadMessage, HeaderFormat, leanFormatVersion)

// DecodeStored is DecodeMessage for a message read from its rule's queue stream, with what
// the stream keeps of it (s): a message of the lean form takes its rule and key from s and
// its creation time from its id; one of the full form has them in its headers.
func DecodeStored(h nats.Header, data []byte, s Stored) (Message, error) {
	m, lean, err := decodeMessage(h, data)
	if err != nil || !lean {
		return m, err
	}
	if s.Rule == "" || s.At.IsZero() {
		return Message{}, errLeanWithoutStream
	}
	m.Rule, m.Key, m.CreatedAt = s.Rule, s.Key, createdAt(m.ID, s.At)
	return m, nil
}

// createdAt is the creation time of a lean message with id, stored at storedAt: when its id
// was issued (IssuedAt), by the ingress's clock as every other state of the message tells
// it, else (an id NewID did not make) when it was stored.
func createdAt(id string, storedAt time.Time) time.Time {
	if t, ok := IssuedAt(id); ok {
		return t
	}
	return storedAt
}

// DecodeMessage reads a Message from a NATS message's headers and data (as written by
// EncodeMessage, of any format version up to FormatVersion). The payload is returned as
// is, not copied. A message of a newer format is ErrBadMessage, saying so.
//
// A message of the lean form (format 3, written by EnqueueNew) leaves its rule, key and
// creation time to its stream: DecodeMessage refuses it (ErrBadMessage); read it with
// DecodeStored.
func DecodeMessage(h nats.Header, data []byte) (Message, error) {
	m, lean, err := decodeMessage(h, data)
	if err == nil && lean {
		return Message{}, errLeanWithoutStream
	}
	return m, err
}

// decodeMessage reads what h and data say of a message; lean: it is of the lean form, and
// its rule, key and creation time are its stream's (DecodeStored).
func decodeMessage(h nats.Header, data []byte) (m Message, lean bool, err error) {
	v := h.Get(HeaderFormat)
	lean = v == leanFormatVersion
	if v != "" && v != fullFormatVersion && !lean {
		n, err := strconv.Atoi(v)
		switch {
		case err == nil && n > FormatVersion:
			return Message{}, false, fmt.Errorf("%w: %s %s: written by a newer sluice (this one reads formats 1 to %d); upgrade this drainer",
				ErrBadMessage, HeaderFormat, v, FormatVersion)
		case err != nil || n < 1:
			return Message{}, false, fmt.Errorf("%w: %s %q: not a format version", ErrBadMessage, HeaderFormat, v)
		}
	}
	m = Message{ID: h.Get(HeaderMsgID), Rule: h.Get(HeaderRule), Payload: data}
	if id := h.Get(HeaderID); id != "" {
		m.ID = id // re-admitted under a generation-specific Nats-Msg-Id (EnqueueAs)
	}
	if m.ID == "" {
		return Message{}, false, fmt.Errorf("%w: no %s header", ErrBadMessage, HeaderMsgID)
	}
	if m.Key, err = url.PathUnescape(h.Get(HeaderKey)); err != nil {
		return Message{}, false, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderKey, err)
	}
	if v := h.Get(HeaderCreatedAt); v != "" {
		if m.CreatedAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Message{}, false, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderCreatedAt, err)
		}
	}
	if v := h.Get(HeaderAttempt); v != "" {
		if m.Attempt, err = strconv.Atoi(v); err != nil {
			return Message{}, false, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderAttempt, err)
		}
	}
	if v := h.Get(HeaderLastError); v != "" {
		if m.LastError, err = url.PathUnescape(v); err != nil {
			m.LastError = v // written by something else: keep it readable rather than fail
		}
	}
	if v := h.Get(HeaderParkedFrom); v != "" {
		if m.ParkedFrom, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Message{}, false, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderParkedFrom, err)
		}
	}
	for k, vs := range h {
		if name, ok := strings.CutPrefix(k, HeaderPrefixUser); ok && name != "" && len(vs) > 0 {
			if m.Headers == nil {
				m.Headers = make(map[string]string)
			}
			m.Headers[name] = vs[0]
		}
	}
	if v := h.Get(HeaderExpiresAt); v != "" {
		if m.ExpiresAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Message{}, false, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderExpiresAt, err)
		}
	}
	m.TraceParent, m.TraceState = h.Get(HeaderTraceParent), h.Get(HeaderTraceState)
	return m, lean, nil
}
