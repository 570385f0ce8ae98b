// Package devenv runs, inside one process, what `sluice dev` (internal/devstack) needs besides sluice
// itself: an embedded NATS server with JetStream, an in-process Redis-compatible store, and
// a demo sink that logs every delivery.
//
// The embedded NATS server is the real nats-server. The in-process store is miniredis
// (github.com/alicebob/miniredis), which runs sluice's Lua scripts unchanged, so `sluice dev` uses
// the same code paths as production for the outflow scheduler, the admission counts and the
// idempotency keys instead of a second implementation (admission limits and /v1/check use
// bucket's in-memory store there: one process needs no shared counters). It is never used
// by tests or in production, where a real Redis is required.
// miniredis does not expire keys on its own, so Redis advances its clock every second.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// NATS is an embedded JetStream server.
type NATS struct {
	srv *server.Server
}

// StartNATS starts an embedded NATS server with JetStream storing in dir, listening on
// addr ("127.0.0.1:4222"; port 0 picks a free one).
func StartNATS(dir, addr string) (*NATS, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("devenv: nats address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("devenv: nats port %q: %w", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// A busy port fails now, naming the address: nats-server itself would only log it
		// and never become ready.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("devenv: nats: %w", err)
		}
		ln.Close()
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "sluice-dev",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("devenv: nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("devenv: embedded NATS server not ready after 15s")
	}
	return &NATS{srv: srv}, nil
}

// URL is the client URL of the embedded server.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Close shuts the server down and waits for it.
func (n *NATS) Close() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// Redis is an in-process Redis-compatible store for `sluice dev`.
type Redis struct {
	mr   *miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
}

// StartRedis starts the in-process store on a free loopback port.
func StartRedis() (*Redis, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("devenv: in-process redis: %w", err)
	}
	r := &Redis{mr: mr, stop: make(chan struct{}), done: make(chan struct{})}
	go r.tick()
	return r, nil
}

// tick advances miniredis's clock with the wall clock so TTLs expire.
func (r *Redis) tick() {
	defer close(r.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.mr.FastForward(now.Sub(last))
			last = now
		}
	}
}

// URL is a redis:// URL for the store.
func (r *Redis) URL() string { return "redis://" + r.mr.Addr() }

// Close stops the store.
func (r *Redis) Close() {
	close(r.stop)
	<-r.done
	r.mr.Close()
}

// Sink is a demo HTTP sink: it answers 200 to every POST /sink/{name} and logs the
// delivery with its rule, key, message id, attempt and arrival time, so a new user can
// watch the outflow happen. It can be told to fail a share of them (SetFault, and
// /_demo/fail while it runs): see Fault.
type Sink struct {
	srv      *http.Server
	ln       net.Listener
	log      *slog.Logger
	count    atomic.Int64
	failed   atomic.Int64
	mu       sync.Mutex
	lastByRK map[string]time.Time
	faults   faults
}

// StartSink listens on addr ("127.0.0.1:8090") and serves until Close.
func StartSink(addr string, log *slog.Logger) (*Sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("devenv: demo sink: %w", err)
	}
	s := &Sink{ln: ln, log: log, lastByRK: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/_demo/fail", s.serveFail)
	mux.HandleFunc("POST /sink/{name}", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		key, _ := url.PathUnescape(r.Header.Get("Sluice-Key"))
		rule := r.Header.Get("Sluice-Rule")
		if f, ok := s.faults.decide(r.URL.Path, rule, key); ok {
			s.fail(w, r, f, rule, key)
			return
		}
		n := s.count.Add(1)
		s.mu.Lock()
		prev, seen := s.lastByRK[rule+"\x00"+key]
		s.lastByRK[rule+"\x00"+key] = now
		if len(s.lastByRK) > 100000 { // a demo: forget old keys rather than grow forever
			clear(s.lastByRK)
		}
		s.mu.Unlock()
		attrs := []any{
			"sink", r.PathValue("name"), "rule", rule, "key", key,
			"id", r.Header.Get("Sluice-Message-Id"), "attempt", r.Header.Get("Sluice-Attempt"),
			"at", now.Format("15:04:05.000"), "bytes", len(body), "total", n,
		}
		if seen {
			attrs = append(attrs, "since_last_for_key", now.Sub(prev).Round(time.Millisecond).String())
		}
		log.Info("demo sink: delivered", attrs...)
		w.WriteHeader(http.StatusOK)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// fail answers one delivery as fault f says, and logs it.
func (s *Sink) fail(w http.ResponseWriter, r *http.Request, f Fault, rule, key string) {
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done(): // the drainer gave up (its sink timeout): that was the point
			t.Stop()
		}
	}
	n := s.failed.Add(1)
	s.log.Info("demo sink: failed", "status", f.Status, "fault", f.String(), "rule", rule, "key", key,
		"id", r.Header.Get("Sluice-Message-Id"), "attempt", r.Header.Get("Sluice-Attempt"), "failed_total", n)
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, f.RetryAfter.Round(time.Second)/time.Second))))
	}
	w.WriteHeader(f.Status)
}

// SetFault adds a fault, or replaces the one with the same path, rule and key; a share of
// 0 removes it.
func (s *Sink) SetFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.faults.set(f)
	return nil
}

// Failed is the number of deliveries answered with a fault.
func (s *Sink) Failed() int64 { return s.failed.Load() }

// URL is the sink's base URL.
func (s *Sink) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the address the sink listens on.
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Count is the number of deliveries received.
func (s *Sink) Count() int64 { return s.count.Load() }

// Close stops the sink.
func (s *Sink) Close(ctx context.Context) error { return s.srv.Shutdown(ctx) }
