package rules

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	goodRules1 = "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	goodRules2 = "domain: a\ndescriptors: [{key: k, name: renamed, rate_limit: {unit: second, requests_per_unit: 2}}]\n"
	badRules   = "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]\n"
)

// replaceFile writes like an editor or a ConfigMap update: a new file renamed over
// the old one, so a poll never sees a half-written file. The temporary name starts
// with '.' so Load skips it.
func replaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitReload(t *testing.T, events <-chan error) error {
	t.Helper()
	select {
	case err := <-events:
		return err
	case <-time.After(10 * time.Second): // a guard against a hang, not a timing assumption
		t.Fatal("no reload attempt")
		return nil
	}
}

func TestWatcherGoodBadGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, goodRules1)

	events := make(chan error, 16)
	var logs syncBuffer
	w, err := NewWatcher(WatcherConfig{
		Paths:    []string{dir},
		Interval: 5 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnReload: func(s *Set, err error) {
			if (s == nil) == (err == nil) {
				t.Errorf("OnReload(%v, %v): exactly one must be set", s, err)
			}
			events <- err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := w.Current()
	if first.Rule("a_k") == nil {
		t.Fatalf("initial rules: %v", names(first))
	}
	ctx := t.Context()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil { // second Start is a no-op
		t.Fatal(err)
	}
	defer w.Stop()

	replaceFile(t, path, badRules)
	err = waitReload(t, events)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "descriptors[0].rate_limit.requests_per_unit" {
		t.Fatalf("bad rules: got %v", err)
	}
	if w.Current() != first || w.Failures() != 1 || w.Successes() != 0 {
		t.Errorf("after a bad change: current changed=%v failures=%d successes=%d",
			w.Current() != first, w.Failures(), w.Successes())
	}

	replaceFile(t, path, goodRules2)
	if err := waitReload(t, events); err != nil {
		t.Fatalf("good rules: %v", err)
	}
	if w.Current().Rule("renamed") == nil || w.Successes() != 1 || w.Failures() != 1 {
		t.Errorf("after a good change: rules %v successes=%d failures=%d", names(w.Current()), w.Successes(), w.Failures())
	}
	w.Stop()
	w.Stop()
	if l := logs.String(); !strings.Contains(l, "rules reload failed") || !strings.Contains(l, "rules reloaded") {
		t.Errorf("logs:\n%s", l)
	}
}

// Poll, driven by hand: no goroutine, no timing.
func TestWatcherPoll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, goodRules1)
	var attempts []error
	w, err := NewWatcher(WatcherConfig{Paths: []string{path}, OnReload: func(_ *Set, err error) { attempts = append(attempts, err) }})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop() // before Start: no-op

	if tried, _ := w.Poll(); tried {
		t.Error("unchanged files were reloaded")
	}
	writeFile(t, path, goodRules1) // touched, same content
	if tried, _ := w.Poll(); tried {
		t.Error("same content was reloaded")
	}
	writeFile(t, path, badRules)
	if tried, err := w.Poll(); !tried || err == nil {
		t.Errorf("bad change: %v %v", tried, err)
	}
	if tried, _ := w.Poll(); tried {
		t.Error("the same bad content was retried")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if tried, err := w.Poll(); !tried || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v %v", tried, err)
	}
	if tried, _ := w.Poll(); tried {
		t.Error("a missing file is reported once, not every poll")
	}
	writeFile(t, path, goodRules2)
	if tried, err := w.Poll(); !tried || err != nil {
		t.Errorf("good change: %v %v", tried, err)
	}
	if w.Failures() != 2 || w.Successes() != 1 || len(attempts) != 3 || w.Current().Rule("renamed") == nil {
		t.Errorf("failures=%d successes=%d attempts=%v", w.Failures(), w.Successes(), attempts)
	}
}

func TestNewWatcherErrors(t *testing.T) {
	t.Parallel()
	if _, err := NewWatcher(WatcherConfig{}); err == nil {
		t.Error("no paths: no error")
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, badRules)
	if _, err := NewWatcher(WatcherConfig{Paths: []string{path}}); err == nil {
		t.Error("bad initial rules: no error")
	}
}

func TestWatcherStopsWithContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules1)
	w, err := NewWatcher(WatcherConfig{Paths: []string{path}, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	w.Stop()                                              // returns once the goroutine has seen the cancellation
	if err := w.Start(context.Background()); err != nil { // restartable
		t.Fatal(err)
	}
	w.Stop()
}
