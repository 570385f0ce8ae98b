package ingress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-io/sluice/internal/ingress"
	ingressproc "github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/request"
)

// A client that sends its headers one byte at a time (slowloris) is disconnected once
// -read-header-timeout has passed, though it never stops sending; a client as slow that
// finishes within the timeout is answered.
func TestSlowHeadersDisconnected(t *testing.T) {
	t.Parallel()
	const timeout = 400 * time.Millisecond
	m := startWith(t, io.Discard, "-read-header-timeout", timeout.String())

	// trickle sends req one byte every gap and reports how long the server kept the
	// connection and what it answered.
	trickle := func(req string, gap time.Duration) (held time.Duration, sent int, answer string) {
		// Timed from before the dial: the server's header timer starts once it has accepted
		// the connection, which may be before Dial returns here on a busy machine.
		start := time.Now()
		conn, err := net.Dial("tcp", m.Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		read := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(conn) // until the server closes (or answers and closes)
			read <- string(b)
		}()
		for sent < len(req) {
			if _, err := conn.Write([]byte{req[sent]}); err != nil {
				break
			}
			sent++
			select {
			case answer = <-read:
				return time.Since(start), sent, answer
			case <-time.After(gap):
			}
		}
		conn.(*net.TCPConn).CloseWrite()
		select {
		case answer = <-read:
		case <-time.After(10 * time.Second):
			t.Fatal("the server neither answered nor closed the connection")
		}
		return time.Since(start), sent, answer
	}

	// 400 header bytes at 20 ms each would take 8 s.
	slow := "GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slow: " + strings.Repeat("a", 400) + "\r\nConnection: close\r\n\r\n"
	held, sent, answer := trickle(slow, 20*time.Millisecond)
	if sent >= len(slow) {
		t.Fatalf("the server read all %d bytes of a request sent over %s (header timeout %s)", sent, held, timeout)
	}
	if held < timeout || held > timeout+2*time.Second {
		t.Errorf("a trickling client was disconnected after %s; want about %s", held, timeout)
	}
	if strings.Contains(answer, "200 OK") {
		t.Errorf("a trickling client was answered: %q", answer)
	}

	fast := "GET /healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n"
	if _, _, answer := trickle(fast, time.Millisecond); !strings.HasPrefix(answer, "HTTP/1.1 200 ") {
		t.Errorf("a request sent byte by byte within the timeout was answered %q", answer)
	}
}

// rawRequest sends req over a new TCP connection and reads the answer's status.
func rawRequest(t *testing.T, addr, req string) (int, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(conn, req) // the server may answer (and stop reading) before the end
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Headers beyond MaxHeaderBytes (64 KiB) are answered 431; headers just within are served.
func TestHugeHeadersRefused(t *testing.T) {
	t.Parallel()
	m := startWith(t, io.Discard)
	req := func(headerBytes int) string {
		var b strings.Builder
		b.WriteString("GET /healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n")
		for i := 0; headerBytes > 0; i++ { // many headers of 1000 bytes, as a cookie jar would
			n := min(headerBytes, 1000)
			fmt.Fprintf(&b, "X-H%d: %s\r\n", i, strings.Repeat("a", n))
			headerBytes -= n
		}
		b.WriteString("\r\n")
		return b.String()
	}
	if code, err := rawRequest(t, m.Addr.String(), req(ingress.MaxHeaderBytes*3/4)); err != nil || code != http.StatusOK {
		t.Fatalf("48 KiB of headers: %d, %v; want 200", code, err)
	}
	for _, n := range []int{ingress.MaxHeaderBytes + 8<<10, 1 << 20} {
		if code, err := rawRequest(t, m.Addr.String(), req(n)); err != nil || code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d KiB of headers: %d, %v; want 431", n>>10, code, err)
		}
	}
}

// The gRPC listener bounds a call's header list (metadata) to MaxHeaderBytes: grpc-go's
// own default is 16 MiB.
func TestGRPCHeaderListBounded(t *testing.T) {
	t.Parallel()
	m := startWith(t, io.Discard)
	conn, err := grpc.NewClient(m.GRPCAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(valueBytes int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("a", valueBytes))
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(1 << 10); err != nil {
		t.Fatalf("1 KiB of metadata: %v", err)
	}
	if err := check(ingress.MaxHeaderBytes + 8<<10); err == nil {
		t.Errorf("a call with %d KiB of metadata was served", (ingress.MaxHeaderBytes+8<<10)>>10)
	}
	if err := check(1 << 10); err != nil { // the connection (or a new one) still serves
		t.Errorf("1 KiB of metadata after the refusal: %v", err)
	}
}

// Every count that could make a request expensive is refused with a 400 naming its field
// (README "Hostile input").
func TestHostileCountsRefused(t *testing.T) {
	t.Parallel()
	m := startWith(t, io.Discard)
	base := "http://" + m.Addr.String()
	entries := func(n int) string {
		es := make([]string, n)
		for i := range es {
			es[i] = fmt.Sprintf(`{"key":"k%d","value":"v"}`, i)
		}
		return "[" + strings.Join(es, ",") + "]"
	}
	descs := func(n int) string {
		ds := make([]string, n)
		for i := range ds {
			ds[i] = `{"entries":[{"key":"merchant_id","value":"m"}]}`
		}
		return "[" + strings.Join(ds, ",") + "]"
	}
	long := strings.Repeat("k", request.MaxKeyBytes+1)
	for _, c := range []struct {
		name, path, body, field string
	}{
		{"submit descriptor entries", "/v1/messages", `{"domain":"orders","descriptor":` + entries(request.MaxDescriptorEntries+1) + `,"payload":1}`, "descriptor"},
		{"submit key length", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"` + long + `"}],"payload":1}`, "descriptor[0].value"},
		{"submit entry name length", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"` + long + `","value":"m"}],"payload":1}`, "descriptor[0].key"},
		{"submit domain length", "/v1/messages", `{"domain":"` + long + `","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1}`, "domain"},
		{"idempotency key length", "/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m"}],"payload":1,"idempotency_key":"` + strings.Repeat("i", request.MaxIdempotencyKeyBytes+1) + `"}`, "idempotency_key"},
		{"check descriptors", "/v1/check", `{"domain":"orders","descriptors":` + descs(request.MaxCheckDescriptors+1) + `}`, "descriptors"},
		{"check descriptor entries", "/v1/check", `{"domain":"orders","descriptors":[{"entries":` + entries(request.MaxDescriptorEntries+1) + `}]}`, "descriptors[0].entries"},
		{"check key length", "/v1/check", `{"domain":"orders","descriptors":[{"entries":[{"key":"merchant_id","value":"` + long + `"}]}]}`, "descriptors[0].entries[0].value"},
		{"json descriptors", "/json", `{"domain":"orders","descriptors":` + descs(request.MaxCheckDescriptors+1) + `}`, "descriptors"},
	} {
		resp, err := http.Post(base+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Field string `json:"field"`
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || err != nil || p.Field != c.field {
			t.Errorf("%s: %d, field %q (%v); want 400 naming %q", c.name, resp.StatusCode, p.Field, err, c.field)
		}
	}
	// At the limits, the same requests pass validation.
	for _, c := range []struct{ path, body string }{
		{"/v1/check", `{"domain":"orders","descriptors":` + descs(request.MaxCheckDescriptors) + `}`},
		{"/v1/messages", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"` + long[1:] + `"}],"payload":1,"idempotency_key":"` + strings.Repeat("i", request.MaxIdempotencyKeyBytes) + `"}`},
	} {
		resp, err := http.Post(base+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadRequest {
			t.Errorf("%s at the limits: 400", c.path)
		}
	}
}

// -read-header-timeout: default 5s, SLUICE_READ_HEADER_TIMEOUT, the flag wins, and a
// timeout that is no timeout is refused.
func TestReadHeaderTimeoutFlag(t *testing.T) {
	t.Parallel()
	parse := func(env string, args ...string) (ingressproc.Config, error) {
		return ingressproc.ParseFlags(append([]string{"-rules", "x"}, args...), func(k string) string {
			if k == "SLUICE_READ_HEADER_TIMEOUT" {
				return env
			}
			return ""
		}, io.Discard)
	}
	for _, c := range []struct {
		env  string
		args []string
		want time.Duration
	}{
		{"", nil, 5 * time.Second},
		{"2s", nil, 2 * time.Second},
		{"2s", []string{"-read-header-timeout", "750ms"}, 750 * time.Millisecond},
	} {
		cfg, err := parse(c.env, c.args...)
		if err != nil || cfg.ReadHeaderTimeout != c.want {
			t.Errorf("env %q, args %q: %s, %v; want %s", c.env, c.args, cfg.ReadHeaderTimeout, err, c.want)
		}
	}
	for _, c := range []struct {
		env  string
		args []string
	}{{"", []string{"-read-header-timeout", "0s"}}, {"soon", nil}, {"-1s", nil}} {
		if _, err := parse(c.env, c.args...); err == nil {
			t.Errorf("env %q, args %q: accepted", c.env, c.args)
		}
	}
}
