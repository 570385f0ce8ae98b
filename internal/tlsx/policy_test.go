package tlsx_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// listen serves s's configuration on a loopback listener, completing each handshake (and
// recording the client certificate's serial) before closing.
func listen(t *testing.T, cfg *tls.Config) (addr string, serials chan *big.Int) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	serials = make(chan *big.Int, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() == nil {
					if ps := tc.ConnectionState().PeerCertificates; len(ps) > 0 {
						serials <- ps[0].SerialNumber
					}
					// A byte, so the client sees the handshake through; then wait for the
					// client to hang up (closing first could reset the connection before the
					// byte is read).
					c.Write([]byte("x"))
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	return ln.Addr().String(), serials
}

func dial(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1)) // a TLS 1.3 server's refusal of the client certificate arrives here
	return err
}

func serverFiles(t *testing.T, ca *tlstest.CA, f tlsx.ServerFiles) *tlsx.Server {
	t.Helper()
	dir := t.TempDir()
	leaf := ca.Issue(t, "server")
	f.CertFile, f.KeyFile = tlstest.Write(t, dir, "s.crt", leaf.CertPEM), tlstest.Write(t, dir, "s.key", leaf.KeyPEM)
	s, err := tlsx.NewServer(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TLS 1.2 is served with ECDHE AEAD suites only: a client offering only a CBC suite (which
// Go's defaults still accept) is refused; an AEAD one is served.
func TestServerOffersAEADSuitesOnly(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	addr, _ := listen(t, serverFiles(t, ca, tlsx.ServerFiles{}).Config())
	for _, cs := range tlsx.CipherSuites {
		name := tls.CipherSuiteName(cs)
		if !strings.HasPrefix(name, "TLS_ECDHE_") || !(strings.Contains(name, "_GCM_") || strings.Contains(name, "CHACHA20_POLY1305")) {
			t.Errorf("%s is no ECDHE AEAD suite", name)
		}
	}
	for _, c := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{c.suite}})
		if (err == nil) != c.ok {
			t.Errorf("TLS 1.2 with only %s: %v, want served %v", tls.CipherSuiteName(c.suite), err, c.ok)
		}
	}
	if err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("TLS 1.1 was served")
	}
}

// leafWith signs a client certificate with the given CN and URI SANs.
func leafWith(t *testing.T, ca *tlstest.CA, cn string, uris ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
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

// -tls-client-names: of the certificates the client CA signed, only those naming a listed
// identity (exactly, or by a prefix ending in *) complete the handshake.
func TestServerClientNames(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	mesh := tlstest.NewCA(t, "mesh")
	dir := t.TempDir()
	s := serverFiles(t, ca, tlsx.ServerFiles{ClientCAFile: tlstest.Write(t, dir, "mesh.crt", mesh.CertPEM),
		ClientNames: []string{"spiffe://cluster.local/ns/edge/*", "ops-tool"}})
	addr, _ := listen(t, s.Config())
	for _, c := range []struct {
		name string
		cert tls.Certificate
		ok   bool
	}{
		{"SPIFFE ID under the prefix", leafWith(t, mesh, "x", "spiffe://cluster.local/ns/edge/sa/envoy"), true},
		{"common name", leafWith(t, mesh, "ops-tool"), true},
		{"another namespace", leafWith(t, mesh, "x", "spiffe://cluster.local/ns/billing/sa/app"), false},
		{"a name that only starts alike", leafWith(t, mesh, "ops-tool-2"), false},
		{"listed name, another CA", leafWith(t, tlstest.NewCA(t, "other"), "ops-tool"), false},
	} {
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: v, Certificates: []tls.Certificate{c.cert}})
			if (err == nil) != c.ok {
				t.Errorf("%s (TLS %x): %v, want served %v", c.name, v, err, c.ok)
			}
		}
	}
}

func TestNameAllowed(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("spiffe://td/ns/a/sa/b")
	c := &x509.Certificate{Subject: pkix.Name{CommonName: "cn"}, DNSNames: []string{"envoy.local"}, URIs: []*url.URL{u},
		EmailAddresses: []string{"ops@example.com"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.7")}}
	for _, c2 := range []struct {
		allowed []string
		want    bool
	}{
		{nil, false}, {[]string{"cn"}, true}, {[]string{"CN"}, false}, {[]string{"envoy.local"}, true},
		{[]string{"spiffe://td/ns/a/sa/b"}, true}, {[]string{"spiffe://td/ns/a/*"}, true}, {[]string{"spiffe://td/ns/ab*"}, false},
		{[]string{"ops@example.com"}, true}, {[]string{"10.0.0.7"}, true}, {[]string{"x", "*"}, true}, {[]string{"envoy"}, false},
	} {
		if got := tlsx.NameAllowed(c, c2.allowed); got != c2.want {
			t.Errorf("NameAllowed(%v) = %v, want %v", c2.allowed, got, c2.want)
		}
	}
	if tlsx.NameAllowed(nil, []string{"*"}) {
		t.Error("a nil certificate was allowed")
	}
}

// ClientFiles (-redis-ca, -redis-cert, -redis-key): the server is verified against the
// bundle, the client certificate is presented and, once its files are rewritten, the new
// one is presented on the next connection without a restart.
func TestClientFilesConfigure(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	mesh := tlstest.NewCA(t, "mesh")
	dir := t.TempDir()
	s := serverFiles(t, ca, tlsx.ServerFiles{ClientCAFile: tlstest.Write(t, dir, "mesh.crt", mesh.CertPEM)})
	addr, serials := listen(t, s.Config())
	first := mesh.Issue(t, "client")
	files := tlsx.ClientFiles{Flag: "-redis", CAFile: tlstest.Write(t, dir, "ca.crt", ca.CertPEM),
		CertFile: tlstest.Write(t, dir, "c.crt", first.CertPEM), KeyFile: tlstest.Write(t, dir, "c.key", first.KeyPEM)}
	cfg := &tls.Config{ServerName: "localhost"}
	if err := files.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := dial(addr, cfg); err != nil {
		t.Fatalf("dial: %v", err)
	}
	if got := <-serials; got.Cmp(first.Serial) != 0 {
		t.Fatalf("presented %v, want %v", got, first.Serial)
	}
	second := mesh.Issue(t, "client")
	tlstest.Write(t, dir, "c.key", second.KeyPEM)
	tlstest.Write(t, dir, "c.crt", second.CertPEM)
	waittest.Eventually(t, 5*time.Second, "the rotated client certificate presented", func() bool {
		if dial(addr, cfg) != nil {
			return false
		}
		return (<-serials).Cmp(second.Serial) == 0
	})
	// A server the bundle does not vouch for is refused.
	other := serverFiles(t, tlstest.NewCA(t, "elsewhere"), tlsx.ServerFiles{})
	oaddr, _ := listen(t, other.Config())
	if err := dial(oaddr, cfg.Clone()); err == nil {
		t.Fatal("a server of another CA was trusted")
	}
	for _, bad := range []tlsx.ClientFiles{
		{Flag: "-redis", CAFile: dir + "/none.crt"},
		{Flag: "-redis", CertFile: dir + "/none.crt", KeyFile: dir + "/none.key"},
	} {
		if err := bad.Configure(&tls.Config{}); err == nil || !strings.HasPrefix(err.Error(), "-redis-c") {
			t.Errorf("%+v: %v, want an error naming the flag", bad, err)
		}
	}
}
