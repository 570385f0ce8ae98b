package process_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
	"github.com/sluice-io/sluice/queue"
)

// The drainer wired for production security: NATS over TLS with a client certificate
// (-nats-ca, -nats-cert, -nats-key), an HTTPS sink trusted through -sink-ca that receives
// signed deliveries (-sign-keys), and its own /healthz over mutual TLS (-tls-cert,
// -tls-key, -tls-client-ca).
func TestDrainerSecure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice CA")
	key := "sign-key-0123456789abcdef0123456789"
	keyFile := filepath.Join(dir, "sign.key")
	os.WriteFile(keyFile, []byte(key), 0o600)

	got := make(chan string, 10)
	sinkSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, sig, _ := strings.Cut(r.Header.Get("Sluice-Signature"), ",v2=")
		ts = strings.TrimPrefix(ts, "t=")
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write([]byte(r.Header.Get("Sluice-Message-Id") + "." + ts + "." + string(body)))
		if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
			http.Error(w, "bad signature", 401)
			got <- "refused"
			return
		}
		got <- string(body)
	}))
	sinkSrv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "sink").TLS(t)}}
	sinkSrv.StartTLS()
	defer sinkSrv.Close()

	rulesFile := filepath.Join(dir, "orders.yaml")
	os.WriteFile(rulesFile, []byte(fmt.Sprintf(`domain: orders
descriptors:
  - key: merchant_id
    name: orders-secure
    queue: {capacity: 10, outflow: {unit: second, requests_per_unit: 100}}
    sink: {url: %q, timeout: 2s}
`, sinkSrv.URL)), 0o644)

	node := natstest.StartTLS(t, &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "nats").TLS(t)},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	// A private Redis: TestDrainerProcess runs alongside on the shared one, and drainers on
	// one Redis claim each other's keys.
	rs := redistest.Start(t, redistest.Options{})
	caFile := tlstest.Write(t, dir, "ca.crt", ca.CertPEM)
	client := ca.Issue(t, "drainer")
	srvLeaf := ca.Issue(t, "drainer-http")

	m := newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(string) string { return "" }
	m.Logger = slog.New(slog.DiscardHandler)
	if err := m.ParseFlags([]string{"-rules", rulesFile, "-http", "127.0.0.1:0", "-nats", node.URL(), "-redis", rs.URL(), "-workers", "2",
		"-nats-ca", caFile, "-nats-cert", tlstest.Write(t, dir, "client.crt", client.CertPEM), "-nats-key", tlstest.Write(t, dir, "client.key", client.KeyPEM),
		"-sink-ca", caFile, "-sign-keys", keyFile,
		"-tls-cert", tlstest.Write(t, dir, "http.crt", srvLeaf.CertPEM), "-tls-key", tlstest.Write(t, dir, "http.key", srvLeaf.KeyPEM), "-tls-client-ca", caFile,
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	// Admit one message as the ingress does, over the same TLS NATS.
	ctx := context.Background()
	nc, js := connectTLS(t, node.URL(), ca, client)
	defer nc.Close()
	q, _ := queue.NewQueues(js, queue.Config{})
	if err := q.Ensure(ctx, "orders-secure", 10); err != nil {
		t.Fatal(err)
	}
	s, _ := queue.NewScheduler(rs.Client(t), queue.SchedulerConfig{})
	msg := queue.Message{ID: uuid.Must(uuid.NewV7()).String(), Key: "m-1", Payload: []byte(`{"order_id":7}`), CreatedAt: time.Now()}
	if _, err := q.Enqueue(ctx, "orders-secure", msg); err != nil {
		t.Fatal(err)
	}
	if err := s.Claims.MarkDue(ctx, "orders-secure", msg.Key); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b != `{"order_id":7}` {
			t.Fatalf("the sink got %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}

	url := "https://" + m.Addr.String() + "/healthz"
	anon := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if _, err := anon.Get(url); err == nil {
		t.Fatal("the drainer's HTTPS served a client without a certificate under -tls-client-ca")
	}
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS(t)}}}}
	resp, err := withCert.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz over mTLS: %d", resp.StatusCode)
	}
}

func connectTLS(t *testing.T, url string, ca *tlstest.CA, leaf tlstest.Leaf) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Secure(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{leaf.TLS(t)}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func TestSecurityFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLUICE_RULES": "r.yaml", "SLUICE_TLS_CERT": "c.pem", "SLUICE_TLS_KEY": "k.pem", "SLUICE_TLS_CLIENT_CA": "ca.pem",
		"SLUICE_NATS_CA": "nca.pem", "SLUICE_NATS_CERT": "nc.pem", "SLUICE_NATS_KEY": "nk.pem", "SLUICE_SINK_CA": "sca.pem", "SLUICE_SIGN_KEYS": "a.key,b.key"}
	m := newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(k string) string { return env[k] }
	if err := m.ParseFlags([]string{"-nats-ca", "flag.pem"}); err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.TLSCert != "c.pem" || c.TLSKey != "k.pem" || c.TLSClientCA != "ca.pem" || c.NATSCA != "flag.pem" || c.NATSCert != "nc.pem" ||
		c.NATSKey != "nk.pem" || c.SinkCA != "sca.pem" || len(c.SignKeys) != 2 {
		t.Fatalf("config %+v", c)
	}
	for _, args := range [][]string{{"-rules", "r", "-tls-cert", "c"}, {"-rules", "r", "-tls-client-ca", "ca"}, {"-rules", "r", "-nats-key", "k"}} {
		m := newDrainer()
		m.Stderr = io.Discard
		m.Getenv = func(string) string { return "" }
		if err := m.ParseFlags(args); err == nil || !strings.Contains(err.Error(), args[2]) {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[2])
		}
	}
	// A short signing key stops the start, naming the flag.
	key := filepath.Join(t.TempDir(), "short.key")
	os.WriteFile(key, []byte("short"), 0o600)
	m = newDrainer()
	m.Stderr = io.Discard
	m.Getenv = func(string) string { return "" }
	m.Logger = slog.New(slog.DiscardHandler)
	if err := m.ParseFlags([]string{"-rules", "r.yaml", "-sign-keys", key}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "-sign-keys") {
		t.Fatalf("Run with a short signing key: %v", err)
	}
}
