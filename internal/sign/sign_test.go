package sign_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/waittest"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A key file that breaks keeps the previous key; a good new one replaces it within a
// second; bad files at start are refused naming -sign-keys.
func TestSignerReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	k1, k2 := "first-key-0123456789", "second-key-0123456789"
	write(t, path, k1+"\n")
	var logs bytes.Buffer // written by Sign, in this goroutine
	s, err := sign.NewSigner([]string{path}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("x")
	signedWith := func(key string) bool {
		return sign.Verify(header(s, sign.SchemeSluice, "id-1", time.Now(), body)[sign.Header], "id-1", body, [][]byte{[]byte(key)}, time.Now(), time.Minute) == nil
	}
	if !signedWith(k1) {
		t.Fatal("not signed with the key file's key (whitespace trimmed)")
	}
	write(t, path, "short")
	// The signer re-reads a changed file at most once a second, when it signs: sign until
	// it has tried (and logged that the file does not load), with the old key every time.
	waittest.Eventually(t, 3*time.Second, "the broken key file noticed", func() bool {
		if !signedWith(k1) {
			t.Fatal("a broken key file replaced the key")
		}
		return strings.Contains(logs.String(), "does not load")
	})
	write(t, path, k2)
	waittest.Eventually(t, 3*time.Second, "the new key used", func() bool { return signedWith(k2) })
	for _, files := range [][]string{{filepath.Join(dir, "missing")}, {path, filepath.Join(dir, "missing")}} {
		if _, err := sign.NewSigner(files, nil); err == nil || !strings.HasPrefix(err.Error(), "-sign-keys: ") {
			t.Errorf("%v: %v, want an error naming -sign-keys", files, err)
		}
	}
	if s, err := sign.NewSigner(nil, nil); s != nil || err != nil {
		t.Fatal("no key files should mean no signer")
	}
}

// header is the headers s signs a delivery of id with.
func header(s *sign.Signer, scheme sign.Scheme, id string, t time.Time, body []byte) map[string]string {
	h := map[string]string{}
	s.Sign(scheme, id, t, body, func(k, v string) { h[k] = v })
	return h
}

// The message id is signed with the timestamp and the body: a captured delivery replayed as
// another message (another Sluice-Message-Id / webhook-id, so another Idempotency-Key) with
// its signature is refused, in both schemes. Before, only "<ts>.<body>" was signed and the
// replay passed.
func TestSignatureBindsTheMessageID(t *testing.T) {
	t.Parallel()
	key := []byte("k-0123456789abcdef")
	now := time.Unix(1767225600, 0)
	body := []byte(`{"order_id":1}`)
	keys := [][]byte{key}
	v := sign.Value(keys, "msg-1", now.Unix(), body)
	if err := sign.Verify(v, "msg-1", body, keys, now, 5*time.Minute); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	if err := sign.Verify(v, "msg-2", body, keys, now, 5*time.Minute); err != sign.ErrInvalid {
		t.Fatalf("the signature replayed under another message id: %v, want ErrInvalid", err)
	}
	if err := sign.Verify(v, "msg-1", []byte(`{"order_id":2}`), keys, now, 5*time.Minute); err != sign.ErrInvalid {
		t.Fatalf("a changed body: %v, want ErrInvalid", err)
	}
	if err := sign.Verify(v, "msg-1", body, keys, now.Add(6*time.Minute), 5*time.Minute); err != sign.ErrStale {
		t.Fatalf("6 minutes later: %v, want ErrStale", err)
	}
	if err := sign.Verify("", "msg-1", body, keys, now, time.Minute); err != sign.ErrMissing {
		t.Fatalf("no header: %v, want ErrMissing", err)
	}
	if !strings.HasPrefix(v, "t=1767225600,v2=") || len(v) != len("t=1767225600,v2=")+64 {
		t.Fatalf("header value %q", v)
	}
	// A signature of sluice before v0.4 (t=…,v1=<hex HMAC(ts.body)>, no id) is not accepted.
	legacy := "t=1767225600,v1=" + hexMAC(key, "1767225600."+string(body))
	if err := sign.Verify(legacy, "msg-1", body, keys, now, 5*time.Minute); err != sign.ErrInvalid {
		t.Fatalf("an old drainer's v1 signature: %v, want ErrInvalid", err)
	}

	sv := sign.StandardValue(keys, "msg-1", now.Unix(), body)
	if err := sign.VerifyStandard("msg-1", "1767225600", sv, body, keys, now, 5*time.Minute); err != nil {
		t.Fatalf("a good Standard Webhooks signature: %v", err)
	}
	if err := sign.VerifyStandard("msg-2", "1767225600", sv, body, keys, now, 5*time.Minute); err != sign.ErrInvalid {
		t.Fatalf("Standard Webhooks, replayed under another webhook-id: %v, want ErrInvalid", err)
	}
	if err := sign.VerifyStandard("msg-1", "1767225601", sv, body, keys, now, 5*time.Minute); err != sign.ErrInvalid {
		t.Fatalf("Standard Webhooks, another timestamp: %v, want ErrInvalid", err)
	}
	if !strings.HasPrefix(sv, "v1,") || len(sv) != len("v1,")+44 {
		t.Fatalf("webhook-signature %q", sv)
	}
}

// The Standard Webhooks specification's own example: secret, id, timestamp and payload
// give the signature it prints, so a sink using a Standard Webhooks library verifies
// sluice's deliveries. A key file may hold the secret as given ("whsec_…").
func TestStandardWebhooksSpecExample(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	write(t, path, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n")
	key, err := sign.ReadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if !bytes.Equal(key, want) {
		t.Fatalf("whsec_ key read as %q", key)
	}
	got := sign.StandardValue([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("spec example signed as %q", got)
	}
	write(t, path, "whsec_not base64!\n")
	if _, err := sign.ReadKey(path); err == nil || !strings.Contains(err.Error(), "base64") {
		t.Fatalf("a bad whsec_ secret: %v", err)
	}
}

// Every key file signs: during a rotation (-sign-keys new,old) a delivery carries one
// signature per key, so a sink holding only the old key and one holding only the new both
// verify it; each file is re-read when it changes; a second file that breaks keeps both
// previous keys (no delivery signed with a subset).
func TestSignerSignsWithEveryKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	newPath, oldPath := filepath.Join(dir, "new"), filepath.Join(dir, "old")
	newKey, oldKey, newer := "new-key-0123456789abcdef", "old-key-0123456789abcdef", "newer-key-0123456789abcdef"
	write(t, newPath, newKey)
	write(t, oldPath, oldKey)
	s, err := sign.NewSigner([]string{newPath, oldPath}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	now := time.Now()
	for _, scheme := range sign.Schemes {
		h := header(s, scheme, "m-1", now, body)
		for _, key := range []string{newKey, oldKey} {
			keys := [][]byte{[]byte(key)}
			var err error
			if scheme == sign.SchemeStandard {
				err = sign.VerifyStandard(h[sign.HeaderWebhookID], h[sign.HeaderWebhookTimestamp], h[sign.HeaderWebhookSignature], body, keys, now, time.Minute)
			} else {
				err = sign.Verify(h[sign.Header], "m-1", body, keys, now, time.Minute)
			}
			if err != nil {
				t.Errorf("%s: a sink holding only %s: %v (headers %v)", scheme, key, err, h)
			}
		}
	}
	if h := header(s, sign.SchemeSluice, "m-1", now, body); strings.Count(h[sign.Header], ",v2=") != 2 {
		t.Errorf("two keys, header %q: want two v2 signatures", h[sign.Header])
	}
	if h := header(s, sign.SchemeStandard, "m-1", now, body); len(strings.Fields(h[sign.HeaderWebhookSignature])) != 2 || h[sign.HeaderWebhookID] != "m-1" {
		t.Errorf("two keys, Standard Webhooks headers %v: want two v1 signatures and the id", h)
	}
	write(t, oldPath, newer)
	waittest.Eventually(t, 3*time.Second, "the rewritten second key file used", func() bool {
		return sign.Verify(header(s, sign.SchemeSluice, "m-1", time.Now(), body)[sign.Header], "m-1", body, [][]byte{[]byte(newer)}, time.Now(), time.Minute) == nil
	})
	for _, scheme := range []string{"", "sluice", "standard-webhooks"} {
		if _, err := sign.ParseScheme(scheme); err != nil {
			t.Errorf("ParseScheme(%q): %v", scheme, err)
		}
	}
	if _, err := sign.ParseScheme("stripe"); err == nil {
		t.Error("ParseScheme(stripe) accepted")
	}
}

func hexMAC(key []byte, content string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(content))
	return hex.EncodeToString(m.Sum(nil))
}
