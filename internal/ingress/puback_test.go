package ingress_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/ingress"
	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
)

// No 202 leaves before its PubAck: with the NATS server's answers held back on the wire
// (a TCP proxy between the ingress and nats-server stops forwarding what the server sends),
// a submit gets no answer; once the answers flow again it gets its 202.
func TestNo202BeforePubAck(t *testing.T) {
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	proxy := startHoldProxy(t, strings.TrimPrefix(n.URL(), "nats://"))

	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte(`
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "http://127.0.0.1:1/unused"}
`), 0o644)
	cfg, err := ingress.ParseFlags([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "", "-nats", "nats://" + proxy.addr, "-redis", r.URL()},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	submit := func() (int, error) {
		resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json",
			strings.NewReader(`{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":1}}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := submit(); err != nil || code != http.StatusAccepted {
		t.Fatalf("submit through the proxy: %d %v", code, err)
	}

	proxy.hold(true)
	answered := make(chan int, 1)
	go func() {
		code, err := submit()
		if err != nil {
			code = -1
		}
		answered <- code
	}()
	select {
	case code := <-answered:
		t.Fatalf("answered %d while the server's answers (the PubAck) were held back", code)
	case <-time.After(1500 * time.Millisecond):
	}
	proxy.hold(false)
	select {
	case code := <-answered:
		if code != http.StatusAccepted {
			t.Fatalf("once the PubAck arrived: %d, want 202", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer after the PubAck was let through")
	}
}

// holdProxy forwards TCP connections to a server; hold(true) stops forwarding what the
// server sends (it is buffered in the kernel and the proxy, not lost) until hold(false).
type holdProxy struct {
	addr string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{addr: ln.Addr().String()}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { ln.Close(); p.hold(false) })
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
			go func() { io.Copy(s, c); s.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					p.mu.Lock()
					for p.held {
						p.cond.Wait()
					}
					p.mu.Unlock()
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	return p
}

func (p *holdProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}
