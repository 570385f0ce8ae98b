package sign_test

import (
	"bytes"
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
		return sign.Verify(s.Sign(time.Now(), body), body, [][]byte{[]byte(key)}, time.Now(), time.Minute) == nil
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
