// Package sign signs HTTP deliveries so that a sink can tell them from anyone else's
// requests. The signed content is the message id, the unix seconds and the body, joined by
// dots — "<id>.<ts>.<body>", as Standard Webhooks sign — with HMAC-SHA256 and a key read
// from a file. Binding the id means a captured delivery cannot be replayed as another
// message (with another Idempotency-Key) within the timestamp's tolerance; binding the
// timestamp means it cannot be replayed later.
//
// Two header layouts (Scheme), the same signature:
//
//	SchemeSluice (default):
//	  Sluice-Signature: t=1767225600,v2=<hex>[,v2=<hex>…]   (id: Sluice-Message-Id)
//	SchemeStandard (Standard Webhooks):
//	  webhook-id: <message id>
//	  webhook-timestamp: 1767225600
//	  webhook-signature: v1,<base64>[ v1,<base64>…]
//
// Every key file given signs: during a key rotation a delivery carries one signature per
// key (new and old), so each sink moves to the new key when it likes (docs/delivery.md
// "Verifying a signature"). Key files are re-read when they change.
//
// Sluice before v0.4 signed "<ts>.<body>" as t=…,v1=…; the v2 label is new so a verifier
// can tell the two apart (an old drainer's delivery has no v2) and an old verifier refuses
// the new signature instead of mis-checking it.
package sign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header is the signature header of SchemeSluice.
const Header = "Sluice-Signature"

// Header names of SchemeStandard, as the Standard Webhooks specification spells them.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// Scheme is how a signature is laid out in headers.
type Scheme string

// Schemes.
const (
	SchemeSluice   Scheme = "sluice"            // Sluice-Signature: t=…,v2=<hex>
	SchemeStandard Scheme = "standard-webhooks" // webhook-id, webhook-timestamp, webhook-signature: v1,<base64>
)

// Schemes lists the schemes, the default first.
var Schemes = []Scheme{SchemeSluice, SchemeStandard}

// ParseScheme reads a scheme's name; "" is SchemeSluice.
func ParseScheme(s string) (Scheme, error) {
	switch Scheme(s) {
	case "", SchemeSluice:
		return SchemeSluice, nil
	case SchemeStandard:
		return SchemeStandard, nil
	}
	return "", fmt.Errorf("unknown signature scheme %q (want %s or %s)", s, SchemeSluice, SchemeStandard)
}

// MinKeyBytes is the shortest key accepted (128 bits).
const MinKeyBytes = 16

// StandardSecretPrefix begins a Standard Webhooks secret: the key is the base64 after it.
const StandardSecretPrefix = "whsec_"

// keyFile is one key file and the key last read from it.
type keyFile struct {
	path string
	mod  time.Time
	size int64
	key  []byte
}

// Signer signs with every one of its key files. A nil *Signer signs nothing.
type Signer struct {
	log *slog.Logger

	keys    atomic.Pointer[[][]byte] // read without a lock by every delivery
	checked atomic.Int64             // unix nanoseconds of the last look at the files

	mu      sync.Mutex // reload; guards the fields below
	files   []keyFile
	lastErr string
}

// NewSigner reads the key files now. No files: nil, nil (deliveries unsigned). Errors name
// -sign-keys.
func NewSigner(files []string, log *slog.Logger) (*Signer, error) {
	return Open("-sign-keys", files, log)
}

// Open is NewSigner whose errors name option (e.g. a rule's "sink.sign_keys").
func Open(option string, files []string, log *slog.Logger) (*Signer, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Signer{log: log}
	for _, f := range files {
		s.files = append(s.files, keyFile{path: f})
	}
	s.checked.Store(time.Now().UnixNano())
	if err := s.reload(); err != nil {
		return nil, fmt.Errorf("%s: %w", option, err)
	}
	return s, nil
}

// ReadKey reads a key file: its bytes, surrounding whitespace removed, at least MinKeyBytes
// of them. A file holding a Standard Webhooks secret ("whsec_" and base64) gives the bytes
// that base64 decodes to, as the Standard Webhooks libraries do, so one secret string
// serves the drainer and a sink using such a library.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k := []byte(strings.TrimSpace(string(b)))
	if rest, ok := strings.CutPrefix(string(k), StandardSecretPrefix); ok {
		if k, err = base64.StdEncoding.DecodeString(rest); err != nil {
			return nil, fmt.Errorf("%s: a %s secret must be base64 after the prefix: %v", path, StandardSecretPrefix, err)
		}
	}
	if len(k) < MinKeyBytes {
		return nil, fmt.Errorf("%s: a key needs at least %d bytes, found %d (e.g. openssl rand -hex 32 > %s)", path, MinKeyBytes, len(k), path)
	}
	return k, nil
}

// reload reads the files that changed. All or nothing: a file that does not load keeps
// every previous key (a half-written rotation never signs with a subset).
func (s *Signer) reload() error {
	next := make([]keyFile, len(s.files))
	changed := s.keys.Load() == nil
	for i, f := range s.files {
		fi, err := os.Stat(f.path)
		if err != nil {
			return err
		}
		if f.key != nil && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
			next[i] = f
			continue
		}
		k, err := ReadKey(f.path)
		if err != nil {
			return err
		}
		next[i] = keyFile{path: f.path, mod: fi.ModTime(), size: fi.Size(), key: k}
		if f.key != nil {
			s.log.Info("sign: signing key reloaded", "file", f.path)
		}
		changed = true
	}
	if !changed {
		return nil
	}
	s.files = next
	keys := make([][]byte, len(next))
	for i, f := range next {
		keys[i] = f.key
	}
	s.keys.Store(&keys)
	return nil
}

// current is the signing keys, the files re-read at most once a second by one caller when
// they changed; deliveries never wait on a lock.
func (s *Signer) current() [][]byte {
	if now := time.Now().UnixNano(); now-s.checked.Load() >= int64(time.Second) && s.mu.TryLock() {
		s.checked.Store(now)
		if err := s.reload(); err != nil {
			if err.Error() != s.lastErr { // once per distinct failure, not every second
				s.log.Error("sign: key file changed but does not load; signing with the previous keys", "err", err)
			}
			s.lastErr = err.Error()
		} else {
			s.lastErr = ""
		}
		s.mu.Unlock()
	}
	return *s.keys.Load()
}

// Sign calls set with the headers that sign the delivery of message id with body at t,
// laid out as scheme says, one signature per key.
func (s *Signer) Sign(scheme Scheme, id string, t time.Time, body []byte, set func(name, value string)) {
	keys := s.current()
	ts := t.Unix()
	if scheme == SchemeStandard {
		set(HeaderWebhookID, id)
		set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
		set(HeaderWebhookSignature, StandardValue(keys, id, ts, body))
		return
	}
	set(Header, Value(keys, id, ts, body))
}

// Value is the Sluice-Signature value: "t=<ts>" and, per key, ",v2=<hex HMAC-SHA256(key,
// id + "." + ts + "." + body)>".
func Value(keys [][]byte, id string, ts int64, body []byte) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(ts, 10))
	for _, k := range keys {
		b.WriteString(",v2=")
		b.WriteString(hex.EncodeToString(MAC(k, id, ts, body)))
	}
	return b.String()
}

// StandardValue is the webhook-signature value: per key "v1,<base64 HMAC-SHA256(key, id +
// "." + ts + "." + body)>", separated by spaces.
func StandardValue(keys [][]byte, id string, ts int64, body []byte) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = "v1," + base64.StdEncoding.EncodeToString(MAC(k, id, ts, body))
	}
	return strings.Join(parts, " ")
}

// MAC is HMAC-SHA256(key, id + "." + ts + "." + body): what both schemes sign.
func MAC(key []byte, id string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verify and VerifyStandard.
var (
	ErrMissing = errors.New("sign: no signature")
	ErrStale   = errors.New("sign: signature timestamp outside the tolerance")
	ErrInvalid = errors.New("sign: signature does not match")
)

// Verify checks a Sluice-Signature header value of the delivery of message id (its
// Sluice-Message-Id) with body against any of keys, and that its timestamp is within
// tolerance of now (a replay later is refused). One matching v2 signature suffices; v1
// signatures (sluice before v0.4: no id) are ignored.
func Verify(header, id string, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) error {
	if header == "" {
		return ErrMissing
	}
	var ts int64 = -1
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return ErrInvalid
			}
			ts = n
		case "v2":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	return check(id, ts, sigs, body, keys, now, tolerance)
}

// VerifyStandard checks the Standard Webhooks headers (webhook-id, webhook-timestamp,
// webhook-signature) of a delivery with body against any of keys, and that the timestamp is
// within tolerance of now.
func VerifyStandard(id, timestamp, signature string, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) error {
	if signature == "" {
		return ErrMissing
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || id == "" {
		return ErrInvalid
	}
	var sigs [][]byte
	for _, part := range strings.Fields(signature) {
		if v, ok := strings.CutPrefix(part, "v1,"); ok {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	return check(id, ts, sigs, body, keys, now, tolerance)
}

func check(id string, ts int64, sigs [][]byte, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) error {
	if ts < 0 || len(sigs) == 0 {
		return ErrInvalid
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	for _, key := range keys {
		want := MAC(key, id, ts, body)
		for _, s := range sigs {
			if hmac.Equal(s, want) {
				return nil
			}
		}
	}
	return ErrInvalid
}
