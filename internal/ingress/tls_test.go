package ingress_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// startTLS runs an ingress whose listeners serve the certificate files in dir
// (server.crt, server.key) with the extra flags.
func startTLS(t *testing.T, extra ...string) *ingress.Main {
	t.Helper()
	return startWith(t, io.Discard, extra...)
}

// startWith runs an ingress on routesRules with the extra flags, logging to logw.
func startWith(t *testing.T, logw io.Writer, extra ...string) *ingress.Main {
	t.Helper()
	return startRules(t, routesRules, logw, extra...)
}

// startRules runs an ingress on rulesYAML with the extra flags, logging to logw.
func startRules(t *testing.T, rulesYAML string, logw io.Writer, extra ...string) *ingress.Main {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	n := natstest.Start(t)
	r := redistest.Start(t, redistest.Options{})
	args := append([]string{"-rules", path, "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-nats", n.URL(), "-redis", r.URL(),
		"-admin-token", routesToken, "-shutdown-timeout", "2s"}, extra...)
	cfg, err := ingress.ParseFlags(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := &ingress.Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func httpsClient(tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
}

func grpcHealth(t *testing.T, addr string, tc *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return err
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over TLS: %v", resp.Status)
	}
	return nil
}

// HTTPS and gRPC over TLS are served with the certificate of -tls-cert; plain HTTP and a
// client that does not trust the CA are refused.
func TestTLSServesHTTPSAndGRPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice test CA")
	leaf := ca.Issue(t, "ingress")
	cert := tlstest.Write(t, dir, "server.crt", leaf.CertPEM)
	key := tlstest.Write(t, dir, "server.key", leaf.KeyPEM)
	m := startTLS(t, "-tls-cert", cert, "-tls-key", key)

	tc := &tls.Config{RootCAs: ca.Pool()}
	resp, err := httpsClient(tc).Get("https://" + m.Addr.String() + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("HTTPS /healthz: %d, TLS %+v", resp.StatusCode, resp.TLS)
	}
	if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(leaf.Serial) != 0 {
		t.Fatal("served a certificate other than -tls-cert")
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("HTTPS negotiated %s, want HTTP/2", resp.Proto)
	}
	// Plain HTTP to the TLS port gets no API answer.
	if resp, err := http.Get("http://" + m.Addr.String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on the TLS listener")
		}
	}
	// TLS 1.1 is refused.
	old := &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}
	if _, err := httpsClient(old).Get("https://" + m.Addr.String() + "/healthz"); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	// A client trusting another CA refuses the server.
	other := tlstest.NewCA(t, "another CA")
	if _, err := httpsClient(&tls.Config{RootCAs: other.Pool()}).Get("https://" + m.Addr.String() + "/healthz"); err == nil {
		t.Fatal("a client trusting another CA accepted the certificate")
	}
	if err := grpcHealth(t, m.GRPCAddr.String(), tc); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	// The certificate's expiry is a metric, for an alert before it runs out.
	resp, err = httpsClient(tc).Get("https://" + m.Addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("sluice_tls_certificate_not_after_seconds %g", float64(resp.TLS.PeerCertificates[0].NotAfter.Unix()))
	if !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// With -tls-client-ca, a client without a certificate (or with one of another CA) is
// refused on both listeners; one with a certificate of the CA is served.
func TestTLSClientCertificateRequired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice test CA")
	leaf := ca.Issue(t, "ingress")
	clientCA := tlstest.NewCA(t, "mesh CA")
	m := startTLS(t, "-tls-cert", tlstest.Write(t, dir, "server.crt", leaf.CertPEM), "-tls-key", tlstest.Write(t, dir, "server.key", leaf.KeyPEM),
		"-tls-client-ca", tlstest.Write(t, dir, "client-ca.crt", clientCA.CertPEM))
	url := "https://" + m.Addr.String() + "/healthz"

	noCert := &tls.Config{RootCAs: ca.Pool()}
	if resp, err := httpsClient(noCert).Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("HTTPS without a client certificate: %d, want a refused handshake", resp.StatusCode)
	}
	if err := grpcHealth(t, m.GRPCAddr.String(), noCert); err == nil {
		t.Fatal("gRPC without a client certificate was served")
	}
	stranger := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{tlstest.NewCA(t, "stranger").Issue(t, "x").TLS(t)}}
	if _, err := httpsClient(stranger).Get(url); err == nil {
		t.Fatal("HTTPS with a certificate of another CA was served")
	}

	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCA.Issue(t, "envoy").TLS(t)}}
	resp, err := httpsClient(withCert).Get(url)
	if err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTPS with a client certificate: %d", resp.StatusCode)
	}
	if err := grpcHealth(t, m.GRPCAddr.String(), withCert); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
}

// The certificate files are rewritten while clients keep sending (on kept-alive and on new
// connections): no request fails, and new connections soon see the new certificate.
func TestTLSRotationUnderLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice test CA")
	first := ca.Issue(t, "ingress-1")
	cert := tlstest.Write(t, dir, "server.crt", first.CertPEM)
	key := tlstest.Write(t, dir, "server.key", first.KeyPEM)
	m := startTLS(t, "-tls-cert", cert, "-tls-key", key)
	url := "https://" + m.Addr.String() + "/healthz"

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			keepAlive := httpsClient(&tls.Config{RootCAs: ca.Pool()})
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := keepAlive
				if i%2 == 0 { // a new connection every request
					c = httpsClient(&tls.Config{RootCAs: ca.Pool()})
					c.Transport.(*http.Transport).DisableKeepAlives = true
				}
				resp, err := c.Get(url)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = io.ErrUnexpectedEOF
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the scenario: load on the first certificate
	second := ca.Issue(t, "ingress-2")
	// cert-manager writes both files; a handshake in between may see a new cert with the
	// old key, which must not fail (the previous pair stays in use).
	tlstest.Write(t, dir, "server.crt", second.CertPEM)
	time.Sleep(50 * time.Millisecond) // the scenario: handshakes between the two writes
	tlstest.Write(t, dir, "server.key", second.KeyPEM)

	waittest.Eventually(t, 10*time.Second, "new connections see the new certificate after the rotation", func() bool {
		newCert := true
		for _, addr := range []string{m.Addr.String(), m.GRPCAddr.String()} { // HTTP and gRPC
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			newCert = newCert && conn.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(second.Serial) == 0
			conn.Close()
		}
		return newCert
	})
	time.Sleep(300 * time.Millisecond) // more load on the new certificate
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed during the rotation; first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 20 {
		t.Fatalf("only %d requests under load", ok.Load())
	}
	t.Logf("%d requests during the rotation, none failed", ok.Load())
}

// Bad TLS flags are refused naming the flag.
func TestTLSFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", "a.crt"}, "-tls-cert and -tls-key"},
		{[]string{"-tls-client-ca", "ca.crt"}, "-tls-client-ca"},
		{[]string{"-nats-cert", "a.crt"}, "-nats-cert and -nats-key"},
		{[]string{"-audit-keep", "0s"}, "-audit-keep"},
		{[]string{"-tls-client-names", "envoy"}, "-tls-client-names: needs -tls-client-ca"},
		{[]string{"-check-client-names", "envoy"}, "-check-client-names: needs -tls-client-ca"},
		{[]string{"-override-max-factor", "0"}, "-override-max-factor: want 1 to 1000000"},
		{[]string{"-override-max-window", "9000h"}, "-override-max-window: want a positive duration up to 8760h"},
		{[]string{"-redis-ca", "ca.pem"}, "-redis-ca: needs a TLS -redis URL"},
		{[]string{"-redis", "rediss://r:6380", "-redis-cert", "c.pem"}, "-redis-cert and -redis-key"},
	} {
		_, err := ingress.ParseFlags(append([]string{"-rules", "x.yaml"}, c.args...), func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	// A missing certificate file stops the process at start, naming the flag.
	m := &ingress.Main{Config: ingress.Config{Settings: process.Settings{Rules: []string{"testdata/none"}, TLSCert: "/nonexistent.crt", TLSKey: "/nonexistent.key"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "-tls-cert") {
		t.Fatalf("Run with a missing certificate: %v", err)
	}
}

// Every security flag has its SLUICE_* variable; the flag wins.
func TestSecurityFlagsFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SLUICE_RULES": "r.yaml", "SLUICE_TLS_CERT": "c.pem", "SLUICE_TLS_KEY": "k.pem", "SLUICE_TLS_CLIENT_CA": "ca.pem",
		"SLUICE_NATS_CA": "nca.pem", "SLUICE_NATS_CERT": "nc.pem", "SLUICE_NATS_KEY": "nk.pem", "SLUICE_SINK_CA": "sca.pem",
		"SLUICE_SIGN_KEYS": "a.key, b.key", "SLUICE_ADMIN_TOKENS": "tokens", "SLUICE_SUBMIT_TOKENS": "submit",
		"SLUICE_ADMIN_TOKEN_FILE": "admin", "SLUICE_AUDIT_KEEP": "720h", "SLUICE_AUDIT_MAX": "5000",
		"SLUICE_TLS_CLIENT_NAMES": "envoy, spiffe://td/ns/edge/*", "SLUICE_CHECK_CLIENT_NAMES": "envoy",
		"SLUICE_REDIS_URL": "rediss://r:6380", "SLUICE_REDIS_CA": "rca.pem", "SLUICE_REDIS_CERT": "rc.pem", "SLUICE_REDIS_KEY": "rk.pem",
		"SLUICE_GRPC_REFLECTION": "true", "SLUICE_OVERRIDE_MAX_FACTOR": "3", "SLUICE_OVERRIDE_MAX_WINDOW": "1h",
	}
	c, err := ingress.ParseFlags([]string{"-sink-ca", "flag.pem"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLSCert != "c.pem" || c.TLSKey != "k.pem" || c.TLSClientCA != "ca.pem" || c.NATSCA != "nca.pem" || c.NATSCert != "nc.pem" ||
		c.NATSKey != "nk.pem" || c.SinkCA != "flag.pem" || len(c.SignKeys) != 2 || c.SignKeys[1] != "b.key" ||
		c.AdminTokensFile != "tokens" || c.SubmitTokensFile != "submit" || c.AdminTokenFile != "admin" ||
		c.AuditKeep != 720*time.Hour || c.AuditMax != 5000 ||
		strings.Join(c.TLSClientNames, "|") != "envoy|spiffe://td/ns/edge/*" || strings.Join(c.CheckClientNames, "|") != "envoy" ||
		c.RedisCA != "rca.pem" || c.RedisCert != "rc.pem" || c.RedisKey != "rk.pem" ||
		!c.GRPCReflection || c.OverrideMaxFactor != 3 || c.OverrideMaxWindow != time.Hour {
		t.Fatalf("config from the environment: %+v", c)
	}
	d, err := ingress.ParseFlags([]string{"-rules", "r.yaml"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d.TLSCert != "" || d.SinkCA != "" || d.SignKeys != nil || d.AuditKeep != 90*24*time.Hour || d.AuditMax != 100_000 ||
		d.GRPCReflection || d.OverrideMaxFactor != 10 || d.OverrideMaxWindow != 24*time.Hour || d.TLSClientNames != nil || d.RedisCA != "" {
		t.Fatalf("defaults: %+v", d)
	}
	if _, err := ingress.ParseFlags([]string{"-rules", "r", "-admin-token", "x", "-admin-token-file", "f"}, func(string) string { return "" }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "-admin-token-file") {
		t.Fatalf("-admin-token with -admin-token-file: %v", err)
	}
	// A bad token file stops the start, naming the flag, file and line.
	bad := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(bad, []byte("ok read 0123456789abcdef0123\nalice admin 0123456789abcdef0123\n"), 0o600)
	m := &ingress.Main{Config: ingress.Config{Settings: process.Settings{Rules: []string{"testdata/none"}}, AdminTokensFile: bad},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "-admin-tokens: "+bad+":2: scope \"admin\"") {
		t.Fatalf("Run with a bad token file: %v", err)
	}
}

// The in-process drainer (-drain) delivers over HTTPS trusted through -sink-ca and signs
// with -sign-keys: the sink verifies the signature of what was submitted.
func TestInProcessDrainerSignsOverHTTPS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sink CA")
	key := "in-process-key-0123456789abcdef"
	keyFile := filepath.Join(dir, "sign.key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	got := make(chan string, 4)
	sink := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if sign.Verify(r.Header.Get(sign.Header), r.Header.Get("Sluice-Message-Id"), body, [][]byte{[]byte(key)}, time.Now(), time.Minute) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			got <- "refused"
			return
		}
		got <- string(body)
	}))
	sink.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "sink").TLS(t)}}
	sink.StartTLS()
	defer sink.Close()
	m := startRules(t, `
domain: orders
descriptors:
  - key: merchant_id
    name: orders
    queue: {capacity: 3, outflow: {unit: second, requests_per_unit: 10}}
    sink: {url: "`+sink.URL+`"}
`, io.Discard, "-drain", "-drain-workers", "2", "-sign-keys", keyFile, "-sink-ca", tlstest.Write(t, dir, "ca.crt", ca.CertPEM))
	a := call(t, "POST", "http://"+m.Addr.String()+"/v1/messages", "", `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-1"}],"payload":{"n":42}}`)
	if a.status != 202 {
		t.Fatalf("submit: %d %v", a.status, a.body)
	}
	select {
	case b := <-got:
		if b != `{"n":42}` {
			t.Fatalf("the sink got %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20s")
	}
}
