// Package tlsx builds the TLS configurations of sluice's listeners and clients from PEM
// files, and reloads them without a restart when the files change (cert-manager and
// kubelet rotate mounted secrets in place). A server reads its certificate, key and client
// CA again on the first handshake after their modification time or size changed (checked
// at most once per Interval); a file half-written during a rotation is not fatal: the last
// good certificate stays in use and the failure is logged once per change.
package tlsx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ServerFiles names the PEM files of a TLS listener. CertFile and KeyFile are required;
// ClientCAFile, when set, makes the listener require a client certificate signed by one of
// its CAs (mutual TLS, as Envoy and Istio sidecars present).
type ServerFiles struct {
	CertFile, KeyFile string
	ClientCAFile      string
	// ClientNames, when set (with ClientCAFile), also requires the client certificate to
	// name one of these identities (NameAllowed): -tls-client-names. A certificate the CA
	// signed for someone else fails the handshake.
	ClientNames []string
	Interval    time.Duration // how often files are checked for changes; default 1s
	Logger      *slog.Logger
}

// fileStamp identifies one version of a file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// Server is a reloading TLS server configuration. Config returns the *tls.Config to
// serve with; it is safe for concurrent use.
type Server struct {
	files ServerFiles

	mu        sync.Mutex
	checked   time.Time
	stamps    [3]fileStamp // cert, key, client CA
	cert      *tls.Certificate
	clientCAs *x509.CertPool
	cfg       *tls.Config // the per-connection config of the current files
	lastErr   string
	reloads   int
}

// NewServer loads the files once; an error names the flag of the file at fault.
func NewServer(f ServerFiles) (*Server, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("-tls-cert and -tls-key: both are needed for TLS (or neither)")
	}
	if f.Interval <= 0 {
		f.Interval = time.Second
	}
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	s := &Server{files: f}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.checked = time.Now()
	return s, nil
}

// load reads every file; on error nothing changes.
func (s *Server) load() error {
	var st [3]fileStamp
	var err error
	if st[0], err = stamp(s.files.CertFile); err != nil {
		return fmt.Errorf("-tls-cert: %w", err)
	}
	if st[1], err = stamp(s.files.KeyFile); err != nil {
		return fmt.Errorf("-tls-key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
	if err != nil {
		return fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("-tls-cert: %w", err)
		}
	}
	var pool *x509.CertPool
	if s.files.ClientCAFile != "" {
		if st[2], err = stamp(s.files.ClientCAFile); err != nil {
			return fmt.Errorf("-tls-client-ca: %w", err)
		}
		if pool, err = LoadPool(s.files.ClientCAFile); err != nil {
			return fmt.Errorf("-tls-client-ca: %w", err)
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if pool != nil {
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if names := s.files.ClientNames; len(names) > 0 {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				// Runs after the chain was verified against the client CAs.
				if len(cs.PeerCertificates) == 0 || !NameAllowed(cs.PeerCertificates[0], names) {
					return errClientNotAllowed
				}
				return nil
			}
		}
	}
	s.stamps, s.cert, s.clientCAs, s.cfg = st, &cert, pool, cfg
	s.reloads++
	return nil
}

// maybeReload reloads the files when one of them changed since the last look, at most
// once per Interval.
func (s *Server) maybeReload() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < s.files.Interval {
		return s.cfg
	}
	s.checked = time.Now()
	changed := false
	for i, p := range []string{s.files.CertFile, s.files.KeyFile, s.files.ClientCAFile} {
		if p == "" {
			continue
		}
		if st, err := stamp(p); err != nil || st != s.stamps[i] {
			changed = true
		}
	}
	if !changed {
		return s.cfg
	}
	if err := s.load(); err != nil {
		if err.Error() != s.lastErr {
			s.lastErr = err.Error()
			s.files.Logger.Error("tls: certificate files changed but do not load; serving the previous certificate", "err", err)
		}
		return s.cfg
	}
	s.lastErr = ""
	s.files.Logger.Info("tls: certificate reloaded", "cert", s.files.CertFile, "not_after", s.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return s.cfg
}

// Config returns the TLS configuration to serve with: TLS 1.2 or newer (TLS 1.2 with the
// AEAD suites of CipherSuites only), h2 and http/1.1, and per connection the certificate (and client CAs) of
// the files as they are now.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.maybeReload(), nil
		},
		// For http.Server.ServeTLS, which wants a certificate source in the outer config.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.maybeReload().Certificates[0], nil
		},
	}
}

// CipherSuites are the TLS 1.2 suites sluice offers and accepts, servers and clients
// alike: ECDHE key exchange with an AEAD cipher only (AES-GCM, ChaCha20-Poly1305). Go's
// defaults also offer CBC suites with SHA-1 MACs (Lucky13-style padding oracles) for old
// clients; nothing sluice talks to needs them. TLS 1.3's suites are all AEAD and not
// configurable.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

var errClientNotAllowed = errors.New("tls: the client certificate names no identity of -tls-client-names")

// CertNames lists the identities a certificate names: its URI SANs (SPIFFE IDs, as Istio
// issues), DNS SANs, e-mail SANs, IP SANs and the subject's common name.
func CertNames(c *x509.Certificate) []string {
	out := make([]string, 0, len(c.URIs)+len(c.DNSNames)+len(c.EmailAddresses)+len(c.IPAddresses)+1)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	out = append(out, c.DNSNames...)
	out = append(out, c.EmailAddresses...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// NameAllowed reports whether c names one of allowed: an exact, case-sensitive match of
// one of CertNames, or, for an entry ending in "*", a name starting with the rest
// ("spiffe://cluster.local/ns/edge/*"). A lone "*" allows any certificate.
func NameAllowed(c *x509.Certificate, allowed []string) bool {
	if c == nil {
		return false
	}
	for _, n := range CertNames(c) {
		for _, a := range allowed {
			if prefix, wild := strings.CutSuffix(a, "*"); (wild && strings.HasPrefix(n, prefix)) || (!wild && n == a) {
				return true
			}
		}
	}
	return false
}

// Certificate returns the certificate in use now.
func (s *Server) Certificate() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert
}

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return pool, nil
}

// Client is the TLS side of an outbound HTTP client that trusts the CAs of a PEM bundle
// (e.g. -sink-ca) instead of the system roots, re-reading the bundle when it changes (checked
// at most once per second), so a CA rotation needs no restart. Each connection gets a fresh
// configuration with the bundle as it is then and the host name it dials, verified as Go
// always does.
type Client struct {
	pool *poolReloader
}

// NewClient reads caFile now; flag names the option in errors (e.g. "-sink-ca"). An empty
// caFile returns nil, nil: use the system roots.
func NewClient(flag, caFile string) (*Client, error) {
	if caFile == "" {
		return nil, nil
	}
	r := &poolReloader{path: caFile}
	if _, err := r.get(); err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return &Client{pool: r}, nil
}

// Config is the configuration of one connection to serverName (a host name or an IP).
func (c *Client) Config(serverName string) *tls.Config {
	pool, _ := c.pool.get() // after NewClient, get always has a pool (the last good one)
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: CipherSuites, RootCAs: pool, ServerName: serverName}
}

// Apply makes t dial TLS with Config: its DialContext (or a plain dialer) connects, then
// the handshake verifies the server against the bundle and the dialled host name. HTTP/2
// is offered when t.ForceAttemptHTTP2 is set.
func (c *Client) Apply(t *http.Transport) {
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	h2 := t.ForceAttemptHTTP2
	t.TLSClientConfig = nil
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := c.Config(host)
		if h2 {
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

type poolReloader struct {
	path    string
	mu      sync.Mutex
	checked time.Time
	st      fileStamp
	pool    *x509.CertPool
}

func (r *poolReloader) get() (*x509.CertPool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool != nil && time.Since(r.checked) < time.Second {
		return r.pool, nil
	}
	r.checked = time.Now()
	st, err := stamp(r.path)
	if err != nil {
		if r.pool != nil {
			return r.pool, nil
		}
		return nil, err
	}
	if r.pool != nil && st == r.st {
		return r.pool, nil
	}
	pool, err := LoadPool(r.path)
	if err != nil {
		if r.pool != nil {
			return r.pool, nil // keep the last good bundle while a rotation is half-written
		}
		return nil, err
	}
	r.pool, r.st = pool, st
	return pool, nil
}

// NotAfterCollector exports the certificate's expiry as
// sluice_tls_certificate_not_after_seconds (Unix time), so an alert can fire well before a
// rotation that did not happen: time() > sluice_tls_certificate_not_after_seconds - 7*86400.
func (s *Server) NotAfterCollector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_tls_certificate_not_after_seconds",
		Help: "Expiry (Unix time) of the certificate the listeners serve now (-tls-cert).",
	}, func() float64 {
		s.maybeReload()
		return float64(s.Certificate().Leaf.NotAfter.Unix())
	})
}

// ClientFiles names the PEM files of an outbound TLS connection whose library takes a
// *tls.Config (go-redis): a CA bundle to trust instead of the system roots, and a client
// certificate to present. Flag prefixes the flag names in errors ("-redis" gives
// -redis-ca, -redis-cert, -redis-key).
type ClientFiles struct {
	Flag                      string
	CAFile, CertFile, KeyFile string
}

// Configure sets cfg up from f, keeping what the library already put there (its
// ServerName): TLS 1.2 or newer with CipherSuites, RootCAs from CAFile (read now; a new
// bundle takes a restart), and a client certificate read now and again on the first
// handshake after its files changed (checked at most once a second), so a rotated
// certificate is presented without a restart — a half-written one keeps the last good.
func (f ClientFiles) Configure(cfg *tls.Config) error {
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	cfg.CipherSuites = CipherSuites
	if f.CAFile != "" {
		pool, err := LoadPool(f.CAFile)
		if err != nil {
			return fmt.Errorf("%s-ca: %w", f.Flag, err)
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" {
		kp := &keyPairReloader{flag: f.Flag, cert: f.CertFile, key: f.KeyFile}
		if _, err := kp.get(); err != nil {
			return err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return nil
}

// keyPairReloader holds a client certificate, re-read when its files change.
type keyPairReloader struct {
	flag, cert, key string
	mu              sync.Mutex
	checked         time.Time
	st              [2]fileStamp
	pair            *tls.Certificate
}

func (r *keyPairReloader) get() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pair != nil && time.Since(r.checked) < time.Second {
		return r.pair, nil
	}
	r.checked = time.Now()
	var st [2]fileStamp
	var err error
	if st[0], err = stamp(r.cert); err == nil {
		st[1], err = stamp(r.key)
	}
	if err == nil && r.pair != nil && st == r.st {
		return r.pair, nil
	}
	var pair tls.Certificate
	if err == nil {
		pair, err = tls.LoadX509KeyPair(r.cert, r.key)
	}
	if err != nil {
		if r.pair != nil {
			return r.pair, nil // mid-rotation: keep presenting the last good certificate
		}
		return nil, fmt.Errorf("%s-cert/%s-key: %w", r.flag, r.flag, err)
	}
	r.pair, r.st = &pair, st
	return r.pair, nil
}
