package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/httpx"
	"github.com/sluice-io/sluice/internal/redact"
	"github.com/sluice-io/sluice/internal/tlsx"
)

// A RunFunc is a whole program: it reads args and the environment, runs until ctx ends
// (SIGINT or SIGTERM), stops, and returns nil or why it failed.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Exec runs a binary's RunFunc with the process's arguments, environment and signals and
// returns its exit code (ExitCode). The first SIGINT or SIGTERM ends ctx: a soft stop.
// A second one is not caught: it ends the process at once (the hard stop).
func Exec(name string, run RunFunc) int {
	ctx, stop := SignalContext()
	defer stop()
	return ExitCode(name, run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr), os.Stderr)
}

// SignalContext is the binaries' handling of signals: the first SIGINT or SIGTERM ends
// ctx (the soft stop); after it the signals are no longer caught, so a second one ends the
// process at once (Go's default action: the hard stop).
func SignalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the next signal takes Go's default action: exit now
	}()
	return ctx, stop
}

// Exit codes of the binaries.
const (
	ExitOK    = 0
	ExitError = 1 // the process could not start or did not stop cleanly
	ExitUsage = 2 // bad flags or environment, -help, or rules that do not check
)

// ErrUsage marks an error in what the user asked for (flags, environment, rules given to
// -check-config): exit code 2.
var ErrUsage = errors.New("usage")

// ErrReported marks an error that was already written for the user (-check-config lists
// every problem itself): it is not printed a second time.
var ErrReported = errors.New("reported")

// ExitCode prints err, prefixed by the program's name (unless it was printed already, or
// is -help's), and returns the exit code.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitUsage
	}
	if !errors.Is(err, ErrReported) {
		fmt.Fprintln(stderr, name+":", redact.Text(err.Error())) // a NATS or Redis URL's password stays out of the terminal and the logs
	}
	if errors.Is(err, ErrUsage) {
		return ExitUsage
	}
	return ExitError
}

// usage is a flag or environment error: it exits 2 and reads as itself.
type usage struct{ err error }

func (u usage) Error() string   { return u.err.Error() }
func (u usage) Unwrap() []error { return []error{u.err, ErrUsage} }

// UsageError marks err (unless nil or -help's) as the user's: it matches ErrUsage.
func UsageError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usage{err}
}

// Version is the module version and VCS revision the binary was built from, as `go
// version -m` shows them: "v0.4.0", "(devel) 1a2b3c4d5e6f+dirty 2026-11-25T10:00:00Z".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module support)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	if at != "" {
		v += " " + at
	}
	return v + " " + bi.GoVersion
}

// NewLogger builds a process logger: format json or text, level debug, info, warn or
// error (Validate has checked both).
func NewLogger(format, level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	// Every line goes through redact.Handler: a URL logged anywhere (a NATS or Redis URL, a
	// sink URL in a delivery error) shows no password, user token or query string.
	if format == "text" {
		return slog.New(redact.Handler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(redact.Handler(slog.NewJSONHandler(w, opts)))
}

// CheckLog checks -log-format and -log-level.
func CheckLog(format, level string) error {
	if format != "json" && format != "text" {
		return fmt.Errorf("-log-format: want json or text, got %q", format)
	}
	switch strings.ToLower(level) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("-log-level: want debug, info, warn or error, got %q", level)
}

// Listen opens a TCP listener; the error names the flag and the address, at once (a busy
// port is "address already in use").
func Listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-%s %s: %w", flagName, addr, err)
	}
	return ln, nil
}

// NewHTTPServer is an HTTP server with the limits of README "Hostile input": what a slow
// or hostile client can hold of a connection. Handshake errors of probes and scanners go
// to the debug log, not stderr.
func NewHTTPServer(h http.Handler, log *slog.Logger, readHeaderTimeout time.Duration) *http.Server {
	if readHeaderTimeout <= 0 {
		readHeaderTimeout = httpx.ReadHeaderTimeout
	}
	return &http.Server{
		Handler:           h,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       httpx.ReadTimeout,
		WriteTimeout:      httpx.WriteTimeout,
		IdleTimeout:       httpx.IdleTimeout,
		MaxHeaderBytes:    httpx.MaxHeaderBytes,
	}
}

// Serve serves srv on ln in the background, over TLS when t is set.
func Serve(srv *http.Server, ln net.Listener, t *tlsx.Server, log *slog.Logger, what string) {
	run := srv.Serve
	if t != nil {
		srv.TLSConfig = t.Config()
		run = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := run(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+": HTTP server stopped", "err", err)
		}
	}()
}

// ServeDebug serves net/http/pprof's handlers on addr (-debug-addr), not on the default
// mux, which no process serves. It returns the listener's address and how to close it.
func ServeDebug(addr string, log *slog.Logger, what string) (net.Addr, func(), error) {
	ln, err := Listen("debug-addr", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: httpx.ReadHeaderTimeout, MaxHeaderBytes: httpx.MaxHeaderBytes, IdleTimeout: httpx.IdleTimeout}
	go srv.Serve(ln)
	log.Info(what+": pprof listening", "addr", ln.Addr().String())
	return ln.Addr(), func() { srv.Close() }, nil
}

// hardStopGrace is how long past its shutdown timeout a soft stop may take before the
// process gives up on it and exits 1.
const hardStopGrace = 5 * time.Second

// WaitForStop waits for ctx to end, then stops the process softly with stop. A stop that
// outlasts timeout + hardStopGrace is abandoned (the hard stop): the error says so and the
// binary exits 1 with whatever was still running.
func WaitForStop(ctx context.Context, log *slog.Logger, what string, timeout time.Duration, stop func()) error {
	<-ctx.Done()
	log.Info(what+": shutting down", "timeout", formatDuration(timeout))
	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	t := time.NewTimer(timeout + hardStopGrace)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("shutdown still running %s after the signal (-shutdown-timeout %s): stopped hard", timeout+hardStopGrace, formatDuration(timeout))
	}
}
