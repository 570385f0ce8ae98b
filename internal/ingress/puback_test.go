package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
)

// No 202 leaves before its PubAck: with the NATS server's answers held back on the wire
// (a TCP proxy between the ingress and nats-server stops forwarding what the server sends),
// a submit gets no answer, nor does a batch (its items are published asynchronously, and
// the answer waits for every PubAck); once the answers flow again they get their 202s.
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
	item := func(key string, n int) string {
		return `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"` + key + `"}],"payload":{"n":` + strconv.Itoa(n) + `}}`
	}
	// submit sends body and returns its status, with the items' statuses of a batch.
	submit := func(body string) (int, []int, error) {
		resp, err := http.Post("http://"+m.Addr.String()+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var answer struct{ Items []struct{ Status int } }
		json.NewDecoder(resp.Body).Decode(&answer)
		var items []int
		for _, it := range answer.Items {
			items = append(items, it.Status)
		}
		return resp.StatusCode, items, nil
	}
	if code, _, err := submit(item("m-1", 1)); err != nil || code != http.StatusAccepted {
		t.Fatalf("submit through the proxy: %d %v", code, err)
	}

	for _, c := range []struct {
		name, body string
		code       int
		items      []int
	}{
		{"single", item("m-1", 2), http.StatusAccepted, nil},
		{"batch", "[" + item("m-1", 3) + "," + item("m-2", 1) + "," + item("m-1", 4) + "]", http.StatusOK, []int{202, 202, 202}},
	} {
		proxy.hold(true)
		answered := make(chan string, 1)
		go func() {
			code, items, err := submit(c.body)
			answered <- fmt.Sprint(code, items, err)
		}()
		select {
		case got := <-answered:
			t.Fatalf("%s: answered %s while the server's answers (the PubAcks) were held back", c.name, got)
		case <-time.After(1500 * time.Millisecond):
		}
		proxy.hold(false)
		want := fmt.Sprint(c.code, c.items, nil)
		if c.items == nil {
			want = fmt.Sprint(c.code, []int(nil), nil)
		}
		select {
		case got := <-answered:
			if got != want {
				t.Fatalf("%s: once the PubAcks arrived: %s, want %s", c.name, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer after the PubAcks were let through", c.name)
		}
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
