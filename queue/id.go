package queue

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Message ids say where their message lives.
//
// An id is "<uuid v7>.<rule token>.<key token>": a random, time-ordered part that makes it
// unique, then the two tokens of its key's queue subject (Queues.Subject). Whoever holds
// an id can find its message without a per-message record anywhere: the key's own subject
// holds at most capacity messages, and the retry and dead-letter streams file messages
// under the id's uuid (IDToken). Nothing in the id changes when the message moves between
// streams (parked and re-admitted, retried, replayed from the dead letters), so it is also
// the sink's Idempotency-Key for its whole life.
//
// Every character of an id is one of [A-Za-z0-9_.-]: it is safe in a URL path, an HTTP
// header and a Nats-Msg-Id. A typical id is ~50 bytes; a 256-byte key makes it ~445.
//
// Ids issued before this form existed are bare uuids: ParseID reports them as not
// locatable, and IDToken files them under themselves, as they always were.

// NewID returns a new message id for a message of (rule, key).
func NewID(rule, key string) (string, error) {
	r := idRandom.Get().(*bufio.Reader)
	u, err := uuid.NewV7FromReader(r)
	idRandom.Put(r)
	if err != nil {
		return "", fmt.Errorf("queue: new message id: %w", err)
	}
	rt := RuleToken(rule)
	b := make([]byte, 0, 36+2+len(rt)+keyTokenLen(key))
	b = appendUUID(b, u)
	b = append(append(append(b, '.'), rt...), '.')
	return string(appendKeyToken(b, key)), nil
}

// idRandom buffers crypto/rand for ids: one read of the system's generator serves 32 ids
// instead of one (a read cost about as much as the rest of NewID). The bytes are as random;
// they only wait in this process's memory until used.
var idRandom = sync.Pool{New: func() any { return bufio.NewReaderSize(rand.Reader, 32*16) }}

// appendUUID appends u as uuid.UUID.String spells it (lower-case hex, 8-4-4-4-12).
func appendUUID(b []byte, u uuid.UUID) []byte {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	hex.Encode(s[9:13], u[4:6])
	hex.Encode(s[14:18], u[6:8])
	hex.Encode(s[19:23], u[8:10])
	hex.Encode(s[24:], u[10:])
	s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
	return append(b, s[:]...)
}

// IDRef is what an id says about its message.
type IDRef struct {
	UUID      uuid.UUID // the unique part; its time is when the id was issued (uuid v7)
	RuleToken string    // RuleToken of the message's rule
	Key       string    // the message's key
}

// ParseID reads an id made by NewID. ok is false for anything else, including the bare
// uuids of earlier versions.
func ParseID(id string) (ref IDRef, ok bool) {
	if len(id) < 36+4 || id[36] != '.' {
		return IDRef{}, false
	}
	u, err := uuid.Parse(id[:36])
	// uuid.Parse also takes upper-case hex: an id NewID never wrote, whose IDToken would
	// differ from the lower-case one's. One message, one spelling.
	if err != nil || u.Version() != 7 || u.String() != id[:36] {
		return IDRef{}, false
	}
	rest := id[37:]
	dot := strings.IndexByte(rest, '.')
	if dot <= 0 {
		return IDRef{}, false
	}
	rt, kt := rest[:dot], rest[dot+1:]
	if RuleToken(rt) != rt {
		return IDRef{}, false
	}
	key, err := KeyFromToken(kt)
	if err != nil || CheckKey(key) != nil || KeyToken(key) != kt {
		return IDRef{}, false
	}
	return IDRef{UUID: u, RuleToken: rt, Key: key}, true
}

// IssuedAt is when an id made by NewID was issued: the unix milliseconds of its uuid v7,
// by the clock of the process that made it. ok is false for an id that does not begin with
// a uuid v7.
func IssuedAt(id string) (t time.Time, ok bool) {
	if len(id) < 36 || id[8] != '-' || id[13] != '-' || id[14] != '7' {
		return time.Time{}, false
	}
	var ms int64
	for i := 0; i < 13; i++ { // 8 + 4 hex digits: 48 bits of milliseconds
		if i == 8 {
			continue // the dash
		}
		c := id[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return time.Time{}, false
		}
		ms = ms<<4 | int64(v)
	}
	return time.UnixMilli(ms), true
}

// IDToken is the subject token under which the retry and dead-letter streams file the
// message with this id: the uuid of an id made by NewID (unique on its own, and short),
// otherwise the id made token-safe (RuleToken), as earlier versions filed bare uuids.
func IDToken(id string) string {
	if len(id) > 36 && id[36] == '.' {
		if _, err := uuid.Parse(id[:36]); err == nil {
			return id[:36]
		}
	}
	return RuleToken(id)
}
