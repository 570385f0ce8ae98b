package natstest

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Relay is a TCP relay in front of a NATS server that can lose the server's answers:
// with DropReplies(true), what the client sends still reaches the server (a delete is
// carried out) while nothing comes back (its answer times out) — a network that fails
// after the request left, the case where an outcome is unknown.
type Relay struct {
	ln    net.Listener
	drop  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

// StartRelay relays a listener on a free loopback port to the server at url (nats://h:p);
// it is closed when the test ends.
func StartRelay(tb testing.TB, url string) *Relay {
	tb.Helper()
	target := strings.TrimPrefix(url, "nats://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Relay{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, s)
			r.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { r.back(c, s); c.Close() }()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	return r
}

// back copies the server's bytes to the client unless replies are being dropped.
func (r *Relay) back(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !r.drop.Load() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// URL is the relay's nats:// URL.
func (r *Relay) URL() string { return "nats://" + r.ln.Addr().String() }

// DropReplies makes the relay discard (true) or pass on (false) what the server sends.
func (r *Relay) DropReplies(drop bool) { r.drop.Store(drop) }
