package sink

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/delivery"
	"github.com/sluice-io/sluice/internal/sign"
	"github.com/sluice-io/sluice/internal/tlsx"
	"github.com/sluice-io/sluice/internal/tlsx/tlstest"
	"github.com/sluice-io/sluice/internal/waittest"
)

// verifySluiceSignature is docs/delivery.md's Go verification snippet, as a sink would
// write it (it does not use package sign, so the documented algorithm itself is under test:
// TestDocumentedVerifiers holds the page's block to this function, word for word, and
// verifyingSink runs it on real deliveries).
func verifySluiceSignature(header, id string, body []byte, keys [][]byte, now time.Time) bool {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v2":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false // missing or stale: a replay of an old delivery
	}
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, s := range sigs {
			if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

// verifyingSink is an HTTPS sink that accepts a delivery only with a valid, fresh
// signature made with one of keys (401 otherwise); skew moves its clock.
type verifyingSink struct {
	srv      *httptest.Server
	keys     atomic.Pointer[[][]byte]
	skew     atomic.Int64
	accepted atomic.Int64
	refused  atomic.Int64
	last     atomic.Pointer[captured] // the last delivery, as received
}

// captured is one request as the sink received it.
type captured struct {
	header http.Header
	body   []byte
}

func startVerifyingSink(t *testing.T, ca *tlstest.CA, keys ...[]byte) *verifyingSink {
	t.Helper()
	s := &verifyingSink{}
	s.keys.Store(&keys)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.last.Store(&captured{header: r.Header.Clone(), body: body})
		now := time.Now().Add(time.Duration(s.skew.Load()))
		if !verifySluiceSignature(r.Header.Get("Sluice-Signature"), r.Header.Get("Sluice-Message-Id"), body, *s.keys.Load(), now) {
			s.refused.Add(1)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		s.accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "sink").TLS(t)}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func writeKey(t *testing.T, dir, name, key string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p+".tmp", []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}

func signedSink(t *testing.T, caFile string, keyFiles ...string) *HTTP {
	t.Helper()
	signer, err := sign.NewSigner(keyFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsx.NewClient("-sink-ca", caFile)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(4)
	if tc != nil {
		tc.Apply(tr)
	}
	h, err := NewHTTP(HTTPConfig{Signer: signer, Client: &http.Client{Transport: tr, CheckRedirect: noRedirects}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Deliveries to an HTTPS sink trusted through -sink-ca carry a signature the sink
// verifies; a wrong key or a stale timestamp is refused by the sink (a 401: dead); during
// a key rotation the drainer signs with both keys and a sink holding either takes it;
// a rewritten key file is used without a restart.
func TestSignedDeliveries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sink CA")
	caFile := tlstest.Write(t, dir, "sink-ca.crt", ca.CertPEM)
	oldKey, newKey := "old-key-0123456789abcdef0123456789", "new-key-0123456789abcdef0123456789"
	sinkSrv := startVerifyingSink(t, ca, []byte(oldKey))
	rule := testRule(sinkSrv.srv.URL)
	m := testMessage()

	oldFile := writeKey(t, dir, "old.key", oldKey)
	h := signedSink(t, caFile, oldFile)
	if o := h.Deliver(t.Context(), rule, m); o.Verdict != delivery.Delivered {
		t.Fatalf("signed delivery: %+v", o)
	}
	// The wrong key: refused by the sink.
	wrong := signedSink(t, caFile, writeKey(t, dir, "wrong.key", "wrong-key-0123456789abcdef012345"))
	if o := wrong.Deliver(t.Context(), rule, m); o.Verdict != delivery.Dead || o.Status != 401 {
		t.Fatalf("delivery signed with a wrong key: %+v, want the sink's 401", o)
	}
	// Unsigned: refused.
	plain := signedSink(t, caFile)
	if o := plain.Deliver(t.Context(), rule, m); o.Status != 401 {
		t.Fatalf("unsigned delivery: %+v, want the sink's 401", o)
	}
	// Stale: the sink's clock is 10 minutes ahead of the signature.
	sinkSrv.skew.Store(int64(10 * time.Minute))
	if o := h.Deliver(t.Context(), rule, m); o.Status != 401 {
		t.Fatalf("stale signature: %+v, want the sink's 401", o)
	}
	sinkSrv.skew.Store(0)

	// Rotation: the drainer signs with both keys (-sign-keys new,old), so a sink still holding
	// only the old key and one already holding only the new key both accept.
	rotated := signedSink(t, caFile, writeKey(t, dir, "new.key", newKey), oldFile)
	if o := rotated.Deliver(t.Context(), rule, m); o.Verdict != delivery.Delivered {
		t.Fatalf("signed with both keys, sink holding the old one: %+v", o)
	}
	onlyNew := [][]byte{[]byte(newKey)}
	sinkSrv.keys.Store(&onlyNew)
	if o := rotated.Deliver(t.Context(), rule, m); o.Verdict != delivery.Delivered {
		t.Fatalf("signed with both keys, sink holding the new one: %+v", o)
	}
	if o := h.Deliver(t.Context(), rule, m); o.Status != 401 {
		t.Fatalf("the old key alone after the sink moved: %+v, want 401", o)
	}
	// The same signer picks up a rewritten key file.
	writeKey(t, dir, "old.key", newKey)
	waittest.Eventually(t, 5*time.Second, "a rewritten key file used", func() bool {
		return h.Deliver(t.Context(), rule, m).Verdict == delivery.Delivered
	})
	if sinkSrv.accepted.Load() < 3 || sinkSrv.refused.Load() < 4 {
		t.Fatalf("sink accepted %d, refused %d", sinkSrv.accepted.Load(), sinkSrv.refused.Load())
	}

	// Without -sink-ca the sink's certificate is not trusted: a retry, nothing sent.
	before := sinkSrv.accepted.Load() + sinkSrv.refused.Load()
	untrusted := signedSink(t, "", oldFile)
	if o := untrusted.Deliver(t.Context(), rule, m); o.Verdict != delivery.Retry || !strings.Contains(o.Err, "certificate") {
		t.Fatalf("delivery to a sink of an untrusted CA: %+v", o)
	}
	if sinkSrv.accepted.Load()+sinkSrv.refused.Load() != before {
		t.Fatal("a request reached the untrusted sink")
	}
}

// A rule's sink.sign_keys signs its deliveries instead of the drainer's -sign-keys; key
// files that do not load keep the message (a retry naming the rule), and nothing is sent.
func TestSignedDeliveriesPerRule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sink CA")
	caFile := tlstest.Write(t, dir, "sink-ca.crt", ca.CertPEM)
	tenantKey := "tenant-key-0123456789abcdef01234"
	sinkSrv := startVerifyingSink(t, ca, []byte(tenantKey))
	h := signedSink(t, caFile, writeKey(t, dir, "default.key", "default-key-0123456789abcdef0123"))
	m := testMessage()

	own := testRule(sinkSrv.srv.URL)
	own.Sink.SignKeys = writeKey(t, dir, "tenant.key", tenantKey)
	if o := h.Deliver(t.Context(), own, m); o.Verdict != delivery.Delivered {
		t.Fatalf("a rule with its own sign_keys: %+v", o)
	}
	if o := h.Deliver(t.Context(), testRule(sinkSrv.srv.URL), m); o.Status != 401 {
		t.Fatalf("a rule without sign_keys is signed with -sign-keys, which this sink refuses: %+v", o)
	}
	before := sinkSrv.accepted.Load() + sinkSrv.refused.Load()
	broken := testRule(sinkSrv.srv.URL)
	broken.Sink.SignKeys = filepath.Join(dir, "missing.key")
	if o := h.Deliver(t.Context(), broken, m); o.Verdict != delivery.Retry || !strings.Contains(o.Err, "sink.sign_keys of rule orders-per-merchant") {
		t.Fatalf("a rule whose key file is missing: %+v, want a retry naming the rule's sink.sign_keys", o)
	}
	if sinkSrv.accepted.Load()+sinkSrv.refused.Load() != before {
		t.Fatal("an unsigned delivery was sent for a rule whose key file is missing")
	}
}
