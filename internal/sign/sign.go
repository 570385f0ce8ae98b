// Package sign signs HTTP deliveries so that a sink can tell them from anyone else's
// requests: HMAC-SHA256 over "<unix seconds>.<body>" with a key read from a file, sent as
//
//	Sluice-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
// During a key rotation the drainer is given two key files: it signs with the first, and
// sinks accept a signature made with either (docs/security.md, "Rotation runbook"). Key files
// are re-read when they change.
package sign

import (
	"crypto/hmac"
	"crypto/sha256"
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

// Header is the name of the signature header.
const Header = "Sluice-Signature"

// MinKeyBytes is the shortest key accepted (128 bits).
const MinKeyBytes = 16

// Signer signs with the first of its key files. A nil *Signer signs nothing.
type Signer struct {
	files []string
	log   *slog.Logger

	key     atomic.Pointer[[]byte] // read without a lock by every delivery
	checked atomic.Int64           // unix nanoseconds of the last look at the file

	mu      sync.Mutex // reload
	mod     time.Time
	size    int64
	lastErr string
}

// NewSigner reads the first key file now (the others are for sinks and only checked to
// exist and hold a key). No files: nil, nil (deliveries unsigned). Errors name -sign-keys.
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
	for _, f := range files {
		if _, err := ReadKey(f); err != nil {
			return nil, fmt.Errorf("%s: %w", option, err)
		}
	}
	s := &Signer{files: files, log: log}
	s.checked.Store(time.Now().UnixNano())
	if err := s.reload(); err != nil {
		return nil, fmt.Errorf("%s: %w", option, err)
	}
	return s, nil
}

// ReadKey reads a key file: its bytes, surrounding whitespace removed, at least
// MinKeyBytes of them.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k := []byte(strings.TrimSpace(string(b)))
	if len(k) < MinKeyBytes {
		return nil, fmt.Errorf("%s: a key needs at least %d bytes, found %d (e.g. openssl rand -hex 32 > %s)", path, MinKeyBytes, len(k), path)
	}
	return k, nil
}

func (s *Signer) reload() error {
	fi, err := os.Stat(s.files[0])
	if err != nil {
		return err
	}
	old := s.key.Load()
	if old != nil && fi.ModTime().Equal(s.mod) && fi.Size() == s.size {
		return nil
	}
	k, err := ReadKey(s.files[0])
	if err != nil {
		return err
	}
	if old != nil {
		s.log.Info("sign: signing key reloaded", "file", s.files[0])
	}
	s.key.Store(&k)
	s.mod, s.size = fi.ModTime(), fi.Size()
	return nil
}

// current is the signing key, re-read at most once a second by one caller when the file
// changed; deliveries never wait on a lock.
func (s *Signer) current() []byte {
	if now := time.Now().UnixNano(); now-s.checked.Load() >= int64(time.Second) && s.mu.TryLock() {
		s.checked.Store(now)
		if err := s.reload(); err != nil {
			if err.Error() != s.lastErr { // once per distinct failure, not every second
				s.log.Error("sign: key file changed but does not load; signing with the previous key", "file", s.files[0], "err", err)
			}
			s.lastErr = err.Error()
		} else {
			s.lastErr = ""
		}
		s.mu.Unlock()
	}
	return *s.key.Load()
}

// Sign returns the Sluice-Signature value of body sent at t.
func (s *Signer) Sign(t time.Time, body []byte) string {
	return Value(s.current(), t.Unix(), body)
}

// Value is "t=<ts>,v1=<hex HMAC-SHA256(key, ts + "." + body)>".
func Value(key []byte, ts int64, body []byte) string {
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(mac(key, ts, body))
}

func mac(key []byte, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verify.
var (
	ErrMissing = errors.New("sign: no Sluice-Signature")
	ErrStale   = errors.New("sign: signature timestamp outside the tolerance")
	ErrInvalid = errors.New("sign: signature does not match")
)

// Verify checks a Sluice-Signature header value against body with any of keys, and that
// its timestamp is within tolerance of now (replays of an old delivery are refused). A
// value may carry several v1= signatures; one match suffices.
func Verify(header string, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) error {
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
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if ts < 0 || len(sigs) == 0 {
		return ErrInvalid
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	for _, key := range keys {
		want := mac(key, ts, body)
		for _, s := range sigs {
			if hmac.Equal(s, want) {
				return nil
			}
		}
	}
	return ErrInvalid
}
