package process_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/freeport"
	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/redistest"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
)

// -redis-ca, -redis-cert, -redis-key against a real redis-server that serves TLS and
// requires client certificates (tls-auth-clients yes): with the bundle and the
// certificate the connection works; without the certificate, or trusting only the
// system roots, it does not. The files need a rediss:// URL.
func TestRedisTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis CA")
	server := ca.Issue(t, "redis")
	clients := tlstest.NewCA(t, "clients CA")
	client := clients.Issue(t, "sluice")
	port, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	redistest.Start(t, redistest.Options{Extra: []string{"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", tlstest.Write(t, dir, "server.crt", server.CertPEM), "--tls-key-file", tlstest.Write(t, dir, "server.key", server.KeyPEM),
		"--tls-ca-cert-file", tlstest.Write(t, dir, "clients.crt", clients.CertPEM), "--tls-auth-clients", "yes"}})
	url := "rediss://127.0.0.1:" + strconv.Itoa(port)
	caFile := tlstest.Write(t, dir, "ca.crt", ca.CertPEM)
	certFile, keyFile := tlstest.Write(t, dir, "client.crt", client.CertPEM), tlstest.Write(t, dir, "client.key", client.KeyPEM)
	ping := func(files process.RedisTLS) error {
		c, err := process.OpenRedisTLS(url, 2, files)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(process.RedisTLS{CA: caFile, Cert: certFile, Key: keyFile}); err != nil {
		t.Fatalf("with the CA and the client certificate: %v", err)
	}
	if err := ping(process.RedisTLS{CA: caFile}); err == nil {
		t.Fatal("without a client certificate the server answered")
	}
	if err := ping(process.RedisTLS{Cert: certFile, Key: keyFile}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("trusting the system roots only: %v, want a certificate error", err)
	}
	for _, c := range []struct {
		url           string
		ca, cert, key string
		want          string
	}{
		{"redis://127.0.0.1:6379", caFile, "", "", "-redis-ca: needs a TLS -redis URL"},
		{"redis://127.0.0.1:6379", "", certFile, keyFile, "-redis-cert: needs a TLS -redis URL"},
		{url, "", certFile, "", "-redis-cert and -redis-key: give both or neither"},
		{url, dir + "/missing.crt", "", "", "-redis-ca: open"},
	} {
		_, err := process.OpenRedisTLS(c.url, 2, process.RedisTLS{CA: c.ca, Cert: c.cert, Key: c.key})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %q", c.url, c, err, c.want)
		}
	}
	if _, err := process.ParseDrainerFlags([]string{"-rules", "x", "-redis-ca", caFile}, func(string) string { return "" }, nil); err == nil || !strings.Contains(err.Error(), "-redis-ca: needs a TLS -redis URL") {
		t.Errorf("drainer -redis-ca with redis://: %v", err)
	}
}
