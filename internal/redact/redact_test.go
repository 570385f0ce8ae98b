package redact_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/redact"
)

func TestURLMasksCredentialsQueryAndFragment(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hooks.example.com/path", "https://hooks.example.com/path"},
		{"https://hooks.example.com/path?token=s3cret&x=1", "https://hooks.example.com/path?REDACTED"},
		{"https://user:hunter2@hooks.example.com/p?sig=abc#frag", "https://user:xxxxx@hooks.example.com/p?REDACTED#REDACTED"},
		{"https://ghp_TOKEN@hooks.example.com/p", "https://xxxxx@hooks.example.com/p"},
		{"nats://sluice:natspass@nats-1:4222", "nats://sluice:xxxxx@nats-1:4222"},
		{"nats://TOKEN@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"redis://:redispass@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"redis+sentinel://:pw@s1:26379?master_name=mymaster&password=pw2", "redis+sentinel://:xxxxx@s1:26379?REDACTED"},
		{"https://u:p%zz@host/x?q=1", "https://xxxxx@host/x?REDACTED"}, // does not parse: masked by hand
	} {
		if got := redact.URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTextMasksEveryURLInAnErrorText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`sink: Post "https://u:***@h.example/hook?api_key=K1": dial tcp 10.0.0.1:443: connect: connection refused`,
			`sink: Post "https://u:xxxxx@h.example/hook?REDACTED": dial tcp 10.0.0.1:443: connect: connection refused`},
		{"nats=nats://a:pw1@h1:4222,nats://b:pw2@h2:4222 ok", "nats=nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222 ok"},
		{"sink: http 301 Moved Permanently to https://x.example/new?t=secret (redirects are not followed)",
			"sink: http 301 Moved Permanently to https://x.example/new?REDACTED (redirects are not followed)"},
		{"no url here: a:b@c", "no url here: a:b@c"},
	} {
		if got := redact.Text(c.in); got != c.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestErrorKeepsWhatItWraps(t *testing.T) {
	err := fmt.Errorf("NATS nats://u:pw@h:4222: %w", fs.ErrNotExist)
	red := redact.Error(err)
	if strings.Contains(red.Error(), "pw") || !errors.Is(red, fs.ErrNotExist) {
		t.Fatalf("Error(%v) = %v (errors.Is %v)", err, red, errors.Is(red, fs.ErrNotExist))
	}
	if redact.Error(nil) != nil {
		t.Fatal("Error(nil) != nil")
	}
	plain := errors.New("plain")
	if redact.Error(plain) != plain {
		t.Fatal("an error with no URL should be returned as it is")
	}
}

// TestHandlerMasksEveryAttribute: whatever a call site logs — a string, an error, a group,
// WithAttrs, the message itself — reaches the output redacted.
func TestHandlerMasksEveryAttribute(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(redact.Handler(slog.NewJSONHandler(&buf, nil))).With("nats", "nats://u:natspw@h:4222")
	log.Info("connecting to redis://:redispw@r:6379",
		"err", fmt.Errorf("post https://u:sinkpw@s/x?k=querysecret: refused"),
		slog.Group("g", "url", "https://tokenuser@s/"),
		"list", []string{"nats://a:listpw@h"})
	out := buf.String()
	for _, secret := range []string{"natspw", "redispw", "sinkpw", "querysecret", "tokenuser", "listpw"} {
		if strings.Contains(out, secret) {
			t.Errorf("log line shows %q: %s", secret, out)
		}
	}
	if !strings.Contains(out, "nats://u:xxxxx@h:4222") || !strings.Contains(out, "https://u:xxxxx@s/x?REDACTED") {
		t.Errorf("log line lost the redacted URLs: %s", out)
	}
}
