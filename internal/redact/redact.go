// Package redact takes the secrets out of URLs before they are shown or logged: a sink URL
// in a delivery error (last_error of GET /v1/messages/{id}, dead letters, logs), the NATS
// and Redis URLs a process starts with, an error that quotes any of them.
//
// A URL keeps its scheme, host and path — what an operator needs to tell which endpoint
// failed — and loses what may carry a credential:
//
//   - a password: "user:xxxxx@"; a user name alone may itself be a token (nats://TOKEN@host,
//     https://TOKEN@host), so it becomes "xxxxx@";
//   - the query string: "?REDACTED" (signed URLs, API keys, Redis/NATS options);
//   - the fragment: "#REDACTED".
//
// One helper for every place: Text for free text (error strings, log messages), URL for one
// URL, Error for an error passed on, Handler for every attribute of every log line.
package redact

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a password or a user name; QueryMask a query string or a fragment.
const (
	Mask      = "xxxxx"
	QueryMask = "REDACTED"
)

// urlPattern finds URLs in text: a scheme, "://", then anything up to white space, a quote
// or an angle bracket (how URLs end in Go's error texts: Post "https://…": dial tcp …).
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://[^\s"'<>` + "`" + `]+`)

// nextURL finds where a comma-separated list of URLs (-nats nats://a,nats://b) starts its
// next URL, so each is redacted on its own.
var nextURL = regexp.MustCompile(`,[A-Za-z][A-Za-z0-9+.\-]*://`)

// URL returns raw with its credentials, query string and fragment masked. Text that does
// not parse as a URL is masked by hand the same way (everything before the last "@" of the
// authority, everything after "?" or "#"), never returned as it was.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return roughURL(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else {
			u.User = url.User(Mask)
		}
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = QueryMask, false
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = QueryMask, ""
	}
	return u.String()
}

// roughURL masks a URL that url.Parse refused (a bad escape, a control character).
func roughURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i] + "?" + QueryMask
	}
	authEnd := len(rest)
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authEnd = i
	}
	if at := strings.LastIndex(rest[:authEnd], "@"); at >= 0 {
		rest = Mask + rest[at:]
	}
	return scheme + "://" + rest
}

// Text returns s with every URL in it passed through URL.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlPattern.ReplaceAllStringFunc(s, func(m string) string {
		cuts := nextURL.FindAllStringIndex(m, -1)
		if len(cuts) == 0 {
			return URL(m)
		}
		var b strings.Builder
		start := 0
		for _, c := range cuts {
			b.WriteString(URL(m[start:c[0]]))
			b.WriteByte(',')
			start = c[0] + 1
		}
		b.WriteString(URL(m[start:]))
		return b.String()
	})
}

// Error returns err with Text applied to its message; errors.Is and errors.As still see
// what err wraps. nil stays nil; an error with nothing to mask is returned as it is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := Text(msg); red != msg {
		return &redacted{msg: red, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// Is keeps errors.Is(Error(err), err) true.
func (r *redacted) Is(target error) bool { return errors.Is(r.err, target) }

// Handler wraps h so that every log line — its message, string attributes, errors and
// anything printed with %v — has its URLs redacted. The process logger of every sluice
// process is wrapped in it (process.NewLogger), so a URL handed to a log call anywhere is
// masked without that call site having to remember.
func Handler(h slog.Handler) slog.Handler { return &handler{h: h} }

type handler struct{ h slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = attr(a)
	}
	return &handler{h: h.h.WithAttrs(red)}
}

func (h *handler) WithGroup(name string) slog.Handler { return &handler{h: h.h.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.Any(a.Key, Error(x))
		case *url.URL:
			if x != nil {
				return slog.String(a.Key, URL(x.String()))
			}
		case []string:
			red := make([]string, len(x))
			for i, s := range x {
				red[i] = Text(s)
			}
			return slog.Any(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
