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
func EncodeMessage(subject string, m Message) *nats.Msg { return encodeMessage(subject, m, "") }

// encodeMessage is EncodeMessage, with the Nats-Expected-Stream header set to stream when
// it is not "" (what jetstream.WithExpectStream sets, without the option's allocations).
// The map is made for exactly its headers: up to 8 it is one group of slots, where a hint
// above 8 made a table of 16 (twice the bytes to allocate, clear and iterate in nats.go's
// headerBytes).
func encodeMessage(subject string, m Message, stream string) *nats.Msg {
	n := 4 + len(m.Headers) // format, rule, key, and one spare (EnqueueAs's Sluice-Id)
	for _, set := range [...]bool{m.ID != "", !m.CreatedAt.IsZero(), m.Attempt != 0, m.LastError != "",
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
	put(HeaderFormat, formatVersion)
	if m.ID != "" {
		put(HeaderMsgID, m.ID)
	}
	put(HeaderRule, m.Rule)
	put(HeaderKey, url.PathEscape(m.Key))
	if !m.CreatedAt.IsZero() {
		put(HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
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

// formatVersion is FormatVersion as written in HeaderFormat.
var formatVersion = strconv.Itoa(FormatVersion)

// DecodeMessage reads a Message from a NATS message's headers and data (as written by
// EncodeMessage, of any format version up to FormatVersion). The payload is returned as
// is, not copied. A message of a newer format is ErrBadMessage, saying so.
func DecodeMessage(h nats.Header, data []byte) (Message, error) {
	if v := h.Get(HeaderFormat); v != "" && v != formatVersion {
		n, err := strconv.Atoi(v)
		switch {
		case err == nil && n > FormatVersion:
			return Message{}, fmt.Errorf("%w: %s %s: written by a newer sluice (this one reads formats 1 to %d); upgrade this drainer",
				ErrBadMessage, HeaderFormat, v, FormatVersion)
		case err != nil || n < 1:
			return Message{}, fmt.Errorf("%w: %s %q: not a format version", ErrBadMessage, HeaderFormat, v)
		}
	}
	m := Message{ID: h.Get(HeaderMsgID), Rule: h.Get(HeaderRule), Payload: data}
	if id := h.Get(HeaderID); id != "" {
		m.ID = id // re-admitted under a generation-specific Nats-Msg-Id (EnqueueAs)
	}
	if m.ID == "" {
		return Message{}, fmt.Errorf("%w: no %s header", ErrBadMessage, HeaderMsgID)
	}
	var err error
	if m.Key, err = url.PathUnescape(h.Get(HeaderKey)); err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderKey, err)
	}
	if v := h.Get(HeaderCreatedAt); v != "" {
		if m.CreatedAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderCreatedAt, err)
		}
	}
	if v := h.Get(HeaderAttempt); v != "" {
		if m.Attempt, err = strconv.Atoi(v); err != nil {
			return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderAttempt, err)
		}
	}
	if v := h.Get(HeaderLastError); v != "" {
		if m.LastError, err = url.PathUnescape(v); err != nil {
			m.LastError = v // written by something else: keep it readable rather than fail
		}
	}
	if v := h.Get(HeaderParkedFrom); v != "" {
		if m.ParkedFrom, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderParkedFrom, err)
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
			return Message{}, fmt.Errorf("%w: %s: %v", ErrBadMessage, HeaderExpiresAt, err)
		}
	}
	m.TraceParent, m.TraceState = h.Get(HeaderTraceParent), h.Get(HeaderTraceState)
	return m, nil
}
