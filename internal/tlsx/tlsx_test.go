package tlsx_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

func clientFor(t *testing.T, caFile string) *http.Client {
	t.Helper()
	c, err := tlsx.NewClient("-sink-ca", caFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{ForceAttemptHTTP2: true}
	c.Apply(tr)
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

func serve(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// issueFor signs a leaf naming only host (no IP), to test hostname verification.
func issueFor(t *testing.T, ca *tlstest.CA, host string) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientConfig (-sink-ca) trusts its CA and no other, checks the host name, and takes a
// CA bundle rewritten on disk without a restart.
func TestClientConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sink CA")
	caFile := tlstest.Write(t, dir, "ca.crt", ca.CertPEM)
	c := clientFor(t, caFile)

	good := serve(t, ca.Issue(t, "sink").TLS(t))
	resp, err := c.Get(good)
	if err != nil {
		t.Fatalf("a sink of the CA: %v", err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("to a sink of the CA: %s, TLS %x; want HTTP/2 over TLS 1.2+", resp.Proto, resp.TLS.Version)
	}
	if _, err := c.Get(strings.Replace(good, "127.0.0.1", "localhost", 1)); err != nil {
		t.Fatalf("by host name: %v", err)
	}
	other := tlstest.NewCA(t, "other CA")
	stranger := serve(t, other.Issue(t, "sink").TLS(t))
	if _, err := c.Get(stranger); err == nil {
		t.Fatal("a sink of another CA was trusted")
	}
	wrongHost := serve(t, issueFor(t, ca, "elsewhere.example"))
	if _, err := c.Get(wrongHost); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("a certificate for another host name: %v, want a host name error", err)
	}

	// The bundle now holds both CAs: the other sink is trusted, without a new client.
	tlstest.Write(t, dir, "ca.crt", append(append([]byte{}, ca.CertPEM...), other.CertPEM...))
	waittest.Eventually(t, 5*time.Second, "a rewritten -sink-ca used", func() bool {
		c.CloseIdleConnections()
		_, err := c.Get(stranger)
		return err == nil
	})

	if _, err := tlsx.NewClient("-sink-ca", dir+"/missing.crt"); err == nil || !strings.HasPrefix(err.Error(), "-sink-ca: ") {
		t.Fatalf("a missing bundle: %v, want an error naming -sink-ca", err)
	}
	os.WriteFile(dir+"/junk.crt", []byte("not pem"), 0o600)
	if _, err := tlsx.NewClient("-sink-ca", dir+"/junk.crt"); err == nil {
		t.Fatal("a bundle without certificates was accepted")
	}
	if c, err := tlsx.NewClient("-sink-ca", ""); c != nil || err != nil {
		t.Fatal("no bundle should mean the system roots (nil config)")
	}
}

// A server keeps its certificate while the files are half-rotated or broken, and takes the
// new pair once both files match.
func TestServerReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	a, b := ca.Issue(t, "a"), ca.Issue(t, "b")
	cert, key := tlstest.Write(t, dir, "tls.crt", a.CertPEM), tlstest.Write(t, dir, "tls.key", a.KeyPEM)
	s, err := tlsx.NewServer(tlsx.ServerFiles{CertFile: cert, KeyFile: key, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.Config()
	served := func() *big.Int {
		c, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		return leaf.SerialNumber
	}
	if served().Cmp(a.Serial) != 0 {
		t.Fatal("not serving the first certificate")
	}
	tlstest.Write(t, dir, "tls.crt", b.CertPEM) // the key is still a's
	// Each step lets the 1 ms Interval pass, in real time: the reload compares file
	// modification times, which the kernel stamps with a coarse real clock.
	time.Sleep(5 * time.Millisecond) // the scenario: an Interval passes and nothing may change
	if served().Cmp(a.Serial) != 0 {
		t.Fatal("a certificate without its key replaced the working pair")
	}
	tlstest.Write(t, dir, "tls.key", b.KeyPEM)
	time.Sleep(5 * time.Millisecond) // the scenario: an Interval (and the coarse file clock) passes
	if served().Cmp(b.Serial) != 0 {
		t.Fatal("the new pair is not served")
	}
	tlstest.Write(t, dir, "tls.crt", []byte("garbage"))
	time.Sleep(5 * time.Millisecond) // the scenario: an Interval passes and nothing may change
	if served().Cmp(b.Serial) != 0 {
		t.Fatal("a broken file replaced the working pair")
	}
	if _, err := tlsx.NewServer(tlsx.ServerFiles{CertFile: dir + "/none.crt", KeyFile: key}); err == nil || !strings.HasPrefix(err.Error(), "-tls-cert: ") {
		t.Fatalf("missing certificate: %v", err)
	}
	good, goodKey := tlstest.Write(t, dir, "good.crt", a.CertPEM), tlstest.Write(t, dir, "good.key", a.KeyPEM)
	if _, err := tlsx.NewServer(tlsx.ServerFiles{CertFile: good, KeyFile: goodKey, ClientCAFile: dir + "/none.crt"}); err == nil || !strings.HasPrefix(err.Error(), "-tls-client-ca: ") {
		t.Fatalf("missing client CA: %v", err)
	}
}
